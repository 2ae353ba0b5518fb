import CredentialServer
import FederateCLI
import Federation
import Logging

/// What `exec` and `serve` share: the session read through an offline client (never the
/// network) and a credential server for it.
struct ServedSession {
    let session: String
    let server: CredentialServer
    let client: FederationClient
    let root: String

    /// Opens the keystore and prepares a server for `common.session`.
    ///
    /// - Parameter requireCredentials: fail with exit 3 (or 4 for a terminated identity)
    ///   when the session has no valid credentials now; when the access group's namespace
    ///   does not exist (no keystore directory, a mistyped group), this also fails with exit 3
    ///   and creates nothing.
    init(_ common: CommonOptions, requireCredentials: Bool) async throws(CLIFailure) {
        let access = try KeystoreAccess(common)
        session = common.session
        root = access.root
        if requireCredentials, !(try access.namespaceExists()) {
            throw Self.noCredentials(session, reason: "nothing is saved in \(access.placeName)")
        }
        client = try await access.offlineClient(expiryMargin: common.margin, use: .longRunning)
        if requireCredentials {
            do {
                _ = try await client.credentials(for: session)
            } catch where error.code == .noValidCredentials {
                throw Self.noCredentials(session, reason: error.message)
            } catch {
                throw CLIFailure.federation(error, root: access.root)
            }
        }
        do {
            server = try CredentialServer(client: client, configuration: CredentialServerConfiguration(session: session), logger: common.logger)
        } catch {
            throw CLIFailure(.usage, error.message)
        }
        do {
            Terminal.neverShow(try server.authorizationToken(for: session).value)
        } catch {
            throw CLIFailure(.internalError, "\(error.message); please report it")
        }
    }

    /// The endpoint once the server listens.
    func endpoint() async throws(CLIFailure) -> CredentialEndpoint {
        do {
            return try await server.endpoint(for: session)
        } catch {
            throw CLIFailure(.internalError, "the credential server could not listen on 127.0.0.1: \(error.message); please report it")
        }
    }

    static func noCredentials(_ session: String, reason: String) -> CLIFailure {
        CLIFailure(
            .noValidCredentials,
            "no valid credentials for session '\(session)' (\(reason)); log in first with 'federate login --session \(session) …' (or 'federate guest'); nothing was run")
    }
}
