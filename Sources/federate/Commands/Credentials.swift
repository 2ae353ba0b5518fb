import ArgumentParser
import Federation

/// `federate credentials`: the saved session's credentials; never calls the network.
///
/// Meant as an AWS `credential_process`, run before every AWS call: it opens the
/// keystore, restores the saved sessions and prints one, nothing else.
struct Credentials: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the session's saved credentials (never calls the network).",
        discussion: "Use as an AWS credential_process: credential_process = federate credentials --session alice"
    )

    @OptionGroup var common: CommonOptions
    @OptionGroup var output: FormatOptions

    func run() async throws(CLIFailure) {
        let access = try KeystoreAccess(common)
        let session = common.session
        let snapshot = try await access.savedSession(session, expiryMargin: common.margin)
        switch snapshot.state {
        case .federated:
            guard let credentials = snapshot.credentials else {
                throw CLIFailure(.internalError, "session '\(session)' is federated but holds no credentials; please report it")
            }
            try Terminal.out(Rendering.credentials(
                credentials, format: output.format, identityId: snapshot.identityId,
                provider: Rendering.providerName(snapshot), session: session))
        case .expired:
            let when = snapshot.expiration.map { " at \(Rendering.iso8601($0))" } ?? ""
            throw CLIFailure(
                .noValidCredentials,
                "the credentials of session '\(session)' expired\(when) (expiry margin \(common.expiryMargin) s); push a new token with 'federate login --session \(session) …'"
            )
        case .terminated:
            throw CLIFailure(
                .rejected,
                "session '\(session)' is terminated: the identity service said its identity is gone or disabled; run 'federate clear --session \(session)', then log in again"
            )
        case .notFederated:
            throw Self.noSession(session, root: access.root)
        default:
            throw CLIFailure(.internalError, "session '\(session)' is in state \(snapshot.state); please report it")
        }
    }

    static func noSession(_ session: String, root: String) -> CLIFailure {
        CLIFailure(
            .noValidCredentials,
            "no session '\(session)' in keystore \(root); log in first with 'federate login --session \(session) …' (or 'federate guest')"
        )
    }
}
