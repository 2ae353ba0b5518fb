import ArgumentParser
import Federation
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

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
        try await CredentialsRequest(common, output).run()
    }

    static func noSession(_ session: String, place: String) -> CLIFailure {
        CLIFailure(
            .noValidCredentials,
            "no session '\(session)' in \(place); log in first with 'federate login --session \(session) …' (or 'federate guest')"
        )
    }
}

/// What `federate credentials` runs with, as plain values: argument-parser's `Credentials` and
/// ``CredentialsCommandLine`` both produce one. Building the option wrappers alone costs
/// argument-parser's generic metadata and conformance lookups, which the cache hit avoids.
struct CredentialsRequest: Equatable {
    var session: String
    var keystore: String?
    var accessGroup: String?
    var region: String?
    var endpoint: String?
    var expiryMargin: Int
    var allowInsecureEndpoint: Bool
    var verbose: Bool
    var format: OutputFormat

    init(_ common: CommonOptions, _ output: FormatOptions) {
        self.init(
            session: common.session, keystore: common.keystore, accessGroup: common.accessGroup, region: common.region,
            endpoint: common.endpoint, expiryMargin: common.expiryMargin, allowInsecureEndpoint: common.allowInsecureEndpoint,
            verbose: common.verbose, format: output.format)
    }

    init(
        session: String, keystore: String?, accessGroup: String?, region: String?, endpoint: String?,
        expiryMargin: Int, allowInsecureEndpoint: Bool, verbose: Bool, format: OutputFormat
    ) {
        self.session = session
        self.keystore = keystore
        self.accessGroup = accessGroup
        self.region = region
        self.endpoint = endpoint
        self.expiryMargin = expiryMargin
        self.allowInsecureEndpoint = allowInsecureEndpoint
        self.verbose = verbose
        self.format = format
    }

    func run() async throws(CLIFailure) {
        let access = try KeystoreAccess(keystore: keystore, accessGroup: accessGroup, logger: KeystoreLocationOptions.logger(verbose: verbose))
        try output(try await access.savedSession(session, expiryMargin: .seconds(expiryMargin)), place: access.placeName)
    }

    /// ``run()`` when one read answers it without suspending (``KeystoreAccess/savedSessionAtOnce(_:expiryMargin:)``);
    /// `false`, with nothing written, when the keystore must be opened in full.
    func runAtOnce() throws(CLIFailure) -> Bool {
        let access = try KeystoreAccess(keystore: keystore, accessGroup: accessGroup, logger: KeystoreLocationOptions.logger(verbose: verbose))
        guard let snapshot = try access.savedSessionAtOnce(session, expiryMargin: .seconds(expiryMargin)) else { return false }
        try output(snapshot, place: access.placeName)
        return true
    }

    private func output(_ snapshot: SessionSnapshot, place: String) throws(CLIFailure) {
        switch snapshot.state {
        case .federated:
            guard let credentials = snapshot.credentials else {
                throw CLIFailure(.internalError, "session '\(session)' is federated but holds no credentials; please report it")
            }
            try Terminal.out(Rendering.credentials(
                credentials, format: format, identityId: snapshot.identityId,
                provider: Rendering.providerName(snapshot), session: session))
        case .expired:
            // Within the margin they count as expired before they do: say which it is.
            let when = snapshot.expiration.map { expiration in
                expiration > Date()
                    ? " expire at \(Rendering.iso8601(expiration)), within the expiry margin of \(expiryMargin) s, so they count as expired"
                    : " expired at \(Rendering.iso8601(expiration)) (expiry margin \(expiryMargin) s)"
            } ?? " expired (expiry margin \(expiryMargin) s)"
            throw CLIFailure(
                .noValidCredentials,
                "the credentials of session '\(session)'\(when); "
                    + (snapshot.isGuest
                        ? "get new ones with 'federate guest --session \(session) …'"
                        : "push a new token with 'federate login --session \(session) …'")
            )
        case .terminated:
            throw CLIFailure(
                .rejected,
                "session '\(session)' is terminated: the identity service said its identity is gone or disabled; run 'federate clear --session \(session)', then log in again"
            )
        case .notFederated:
            throw Credentials.noSession(session, place: place)
        default:
            throw CLIFailure(.internalError, "session '\(session)' is in state \(snapshot.state); please report it")
        }
    }
}
