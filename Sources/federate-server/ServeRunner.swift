import CredentialServer
import FederateCLI
import Federation
import Logging
import ServiceLifecycle
import UnixSignals

/// `federate serve`'s work: print the two variables, serve until SIGINT/SIGTERM.
enum ServeRunner {
    static func run(_ serve: Serve) async throws(CLIFailure) {
        let common = serve.common
        try TokenDestination.check()
        let stop = StopSignals.serve.map(ServeStop.init(trap:))
        let served = try await ServedSession(common, requireCredentials: false)
        do {
            _ = try await served.client.credentials(for: served.session)
        } catch where error.code == .storage {
            throw CLIFailure.federation(error, root: served.root)
        } catch where error.code == .identityTerminated {
            Terminal.note("note: session '\(served.session)' is terminated (\(error.message)); requests fail until you run 'federate clear --session \(served.session)' and log in again")
        } catch {
            Terminal.note("note: session '\(served.session)' has no valid credentials now (\(error.message)); requests fail until you log in with 'federate login --session \(served.session) …'")
        }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [served.server], gracefulShutdownSignals: stop == nil ? [.sigterm, .sigint] : [],
                logger: common.logger ?? Self.silent))
        stop?.serving(group)
        let serving = Task { try await group.run() }
        do {
            let endpoint = try await served.endpoint()
            // Stopped already: nobody will fetch from it.
            guard stop?.isStopping != true else {
                _ = await serving.result
                return
            }
            // Said where the token is written, not for a serve that stops before.
            if let exposure = TokenDestination.exposure() { Terminal.note(exposure) }
            try Terminal.out(
                "export \(CredentialEndpoint.fullURIVariable)=\(Rendering.shellQuoted(endpoint.url))\n"
                    + "export \(CredentialEndpoint.authorizationTokenVariable)=\(Rendering.shellQuoted(endpoint.authorizationToken.value))\n")
        } catch {
            await group.triggerGracefulShutdown()
            _ = await serving.result
            // A server stopped before it listened has no endpoint: asked for, not a failure.
            if stop?.isStopping == true { return }
            throw error
        }
        if case .failure(let error) = await serving.result {
            let reason = (error as? CredentialServerError)?.message ?? "the credential server failed: \(type(of: error))"
            throw CLIFailure(.internalError, "\(reason); please report it")
        }
    }

    private static let silent = Logger(label: "federate", factory: { _ in SwiftLogNoOpLogHandler() })
}
