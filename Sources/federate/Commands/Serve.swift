import ArgumentParser
import CredentialServer
import Federation
import Logging
import ServiceLifecycle
import UnixSignals

/// `federate serve`: prints the container-credential variables as `export` lines, then
/// serves the session on 127.0.0.1 until SIGINT or SIGTERM; never calls the network.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve the session's credentials on 127.0.0.1 until SIGINT/SIGTERM; print the variables to hand a process.",
        discussion: """
            Prints export AWS_CONTAINER_CREDENTIALS_FULL_URI=… and export AWS_CONTAINER_AUTHORIZATION_TOKEN=… \
            (single-quoted) on stdout, then serves; each request reads the session as the keystore holds it then. \
            Exits 0 on SIGINT or SIGTERM. A session without valid credentials is served anyway (requests get 404 \
            until you log in), with a note on stderr.
            """
    )

    @OptionGroup var common: CommonOptions

    func run() async throws(CLIFailure) {
        let served = try await ServedSession(common, requireCredentials: false)
        do {
            _ = try await served.client.credentials(for: served.session)
        } catch where error.code == .storage {
            throw CLIFailure.federation(error, root: served.root)
        } catch {
            Terminal.note("note: session '\(served.session)' has no valid credentials now (\(error.message)); requests fail until you log in with 'federate login --session \(served.session) …'")
        }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [served.server], gracefulShutdownSignals: [.sigterm, .sigint], logger: common.logger ?? Self.silent))
        let serving = Task { try await group.run() }
        do {
            let endpoint = try await served.endpoint()
            try Terminal.out(
                "export \(CredentialEndpoint.fullURIVariable)=\(Rendering.shellQuoted(endpoint.url))\n"
                    + "export \(CredentialEndpoint.authorizationTokenVariable)=\(Rendering.shellQuoted(endpoint.authorizationToken.value))\n")
        } catch {
            await group.triggerGracefulShutdown()
            _ = await serving.result
            throw error
        }
        if case .failure(let error) = await serving.result {
            throw CLIFailure(.internalError, "the credential server failed: \(type(of: error)); please report it")
        }
    }

    private static let silent = Logger(label: "federate", factory: { _ in SwiftLogNoOpLogHandler() })
}
