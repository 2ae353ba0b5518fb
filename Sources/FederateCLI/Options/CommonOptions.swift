package import ArgumentParser
import Federation
import SecureStorage
package import Logging

/// The options every subcommand takes (docs/cli.md, "Common options", with `--expiry-margin`
/// and `--verbose`).
package struct CommonOptions: ParsableArguments {
    /// `--expiry-margin`'s default: the library's.
    static let defaultExpiryMarginSeconds = Int(FederationConfiguration.defaultExpiryMargin.components.seconds)

    @Option(name: .long, help: ArgumentHelp("The session (one per end user).", valueName: "NAME"))
    package var session: String = "default"

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The keystore directory, or a PostgreSQL database as postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=MODE (key: $IDENTITY_BROKER_KEY, $IDENTITY_BROKER_PASSPHRASE or $IDENTITY_BROKER_KEY_FILE). Default: $IDENTITY_BROKER_KEYSTORE, else $XDG_DATA_HOME/identity-broker, else ~/.local/share/identity-broker.",
            valueName: "DIR|postgres://URL"))
    var keystore: String?

    @Option(
        name: .customLong("access-group"),
        help: ArgumentHelp("The keystore access group shared through a Unix group; omit for items private to you.", valueName: "GROUP"))
    var accessGroup: String?

    @Option(name: .long, help: ArgumentHelp("The AWS region; default: the identity pool ID's prefix.", valueName: "R"))
    var region: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The Cognito Identity endpoint; default: $AWS_ENDPOINT_URL_COGNITO_IDENTITY, else $AWS_ENDPOINT_URL, else AWS's.",
            valueName: "URL"))
    var endpoint: String?

    @Option(
        name: .customLong("expiry-margin"),
        help: ArgumentHelp("Credentials count as expired this many seconds before their expiration.", valueName: "SECONDS"))
    package var expiryMargin: Int = CommonOptions.defaultExpiryMarginSeconds

    @Flag(
        name: .customLong("allow-insecure-endpoint"),
        help: "Allow a plaintext http:// --endpoint (or AWS_ENDPOINT_URL*) to a host that is not loopback; tokens then travel unencrypted. For a local emulator in a container network only.")
    var allowInsecureEndpoint = false

    @Flag(name: .long, help: "Log the library's debug messages to stderr (never a secret).")
    var verbose = false

    package init() {}

    package func validate() throws {
        if let problem = Self.problem(session: session, expiryMargin: expiryMargin, accessGroup: accessGroup, keystore: keystore) {
            throw ValidationError(problem)
        }
    }

    /// What `validate()` refuses, worded as argument-parser prints it; `nil` when valid.
    static func problem(session: String, expiryMargin: Int, accessGroup: String?, keystore: String?) -> String? {
        guard expiryMargin >= 0 else {
            return "--expiry-margin must be 0 or more seconds"
        }
        do {
            try SessionName.validate(session)
        } catch {
            return "--session: \(error.message)"
        }
        if let accessGroup, accessGroup.isEmpty {
            return "--access-group must not be empty (omit it for the private keystore)"
        }
        if let accessGroup, let problem = groupNameProblem(accessGroup, option: "--access-group") {
            return problem
        }
        if let keystore, keystore.isEmpty {
            return "--keystore must not be empty"
        }
        return nil
    }

    /// Why `name` cannot name an access group (too long), worded for `option`; `nil` when it can.
    static func groupNameProblem(_ name: String, option: String) -> String? {
        guard name.utf8.count > AccessGroup.maximumNameBytes else { return nil }
        return "\(option) takes a group name of at most \(AccessGroup.maximumNameBytes) bytes, not \(name.utf8.count)"
    }

    /// A debug logger to stderr with `--verbose`, else none.
    package var logger: Logger? { Self.logger(verbose: verbose) }

    static func logger(verbose: Bool) -> Logger? {
        guard verbose else { return nil }
        var logger = Logger(label: "federate", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = .debug
        return logger
    }

    /// The expiry margin as a `Duration`.
    package var margin: Duration { .seconds(expiryMargin) }
}

/// `--format process|json|env`, for the subcommands that print credentials.
enum OutputFormat: String, ExpressibleByArgument, CaseIterable, Sendable {
    /// The AWS `credential_process` JSON.
    case process
    /// `process` plus `IdentityId`, `Provider` and `Session`.
    case json
    /// `export AWS_…=…` lines for a POSIX shell.
    case env
}

/// The `--format` option.
struct FormatOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("How to print the credentials.", valueName: "process|json|env"))
    var format: OutputFormat = .process
}
