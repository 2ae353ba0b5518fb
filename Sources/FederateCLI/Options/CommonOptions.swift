package import ArgumentParser
import Federation
import SecureStorage
package import Logging

/// The options every subcommand but `rekey` and `migrate` takes (docs/cli.md, "Common
/// options", with `--expiry-margin` and `--verbose`): ``KeystoreOptions`` and those of a
/// session and its identity pool.
package struct CommonOptions: ParsableArguments {
    /// `--expiry-margin`'s default: the library's.
    static let defaultExpiryMarginSeconds = Int(FederationConfiguration.defaultExpiryMargin.components.seconds)

    @Option(name: .long, help: ArgumentHelp("The session (one per end user).", valueName: "NAME"))
    package var session: String = "default"

    @OptionGroup var store: KeystoreOptions

    @Option(name: .long, help: ArgumentHelp("The AWS region of the identity service (login and guest; other commands ignore it); default: the identity pool ID's prefix.", valueName: "R"))
    var region: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The Cognito Identity endpoint (login and guest; other commands ignore it); default: $AWS_ENDPOINT_URL_COGNITO_IDENTITY, else $AWS_ENDPOINT_URL, else AWS's.",
            valueName: "URL"))
    var endpoint: String?

    @Option(
        name: .customLong("expiry-margin"),
        help: ArgumentHelp("Credentials count as expired this many seconds before their expiration.", valueName: "SECONDS"))
    package var expiryMargin: Int = CommonOptions.defaultExpiryMarginSeconds

    @Flag(
        name: .customLong("allow-insecure-endpoint"),
        help: "Allow a plaintext http:// --endpoint (or AWS_ENDPOINT_URL*) to a host that is not loopback; tokens then travel unencrypted. For a local emulator in a container network only (login and guest; other commands ignore it).")
    var allowInsecureEndpoint = false

    package init() {}

    /// `--keystore`.
    var keystore: String? { store.keystore }
    /// `--access-group`.
    var accessGroup: String? { store.accessGroup }
    /// `--verbose`.
    var verbose: Bool { store.verbose }

    /// The keystore's options are checked by ``KeystoreOptions`` (argument-parser validates a
    /// nested group as it reads it, before this).
    package func validate() throws {
        if let problem = Self.sessionProblem(session: session, expiryMargin: expiryMargin) {
            throw ValidationError(problem)
        }
    }

    /// For `login` and `guest`, which use `--endpoint`: an empty one is an unset variable
    /// passed on, which the library refuses too; said here in the option's name.
    func validateEndpoint() throws {
        if endpoint == "" {
            throw ValidationError(
                "--endpoint is empty (an unset variable?): leave it out to use $AWS_ENDPOINT_URL_COGNITO_IDENTITY, else $AWS_ENDPOINT_URL, else AWS's own")
        }
    }

    /// What argument-parser refuses in these options, keystore options included, worded as
    /// it prints it; `nil` when valid. For a command line read without it.
    static func problem(session: String, expiryMargin: Int, accessGroup: String?, keystore: String?) -> String? {
        sessionProblem(session: session, expiryMargin: expiryMargin)
            ?? KeystoreOptions.problem(accessGroup: accessGroup) ?? KeystoreLocationOptions.problem(keystore: keystore)
    }

    private static func sessionProblem(session: String, expiryMargin: Int) -> String? {
        guard expiryMargin >= 0 else {
            return "--expiry-margin must be 0 or more seconds"
        }
        do {
            try SessionName.validate(session)
        } catch {
            return "--session: \(error.message)"
        }
        return nil
    }

    /// A debug logger to stderr with `--verbose`, else none.
    package var logger: Logger? { store.logger }

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
