import ArgumentParser
import SecureStorage
package import Logging

/// Where the keystore is and how to log: all that `migrate` takes besides its two groups.
package struct KeystoreLocationOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The keystore directory, or a PostgreSQL database as postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=MODE (key: $IDENTITY_BROKER_KEY or $IDENTITY_BROKER_PASSPHRASE, else the key file a directory keeps, or for a database the one $IDENTITY_BROKER_KEY_FILE names). Default: $IDENTITY_BROKER_KEYSTORE, else $XDG_DATA_HOME/identity-broker, else ~/.local/share/identity-broker.",
            valueName: "DIR|postgres://URL"))
    var keystore: String?

    @Flag(name: .long, help: "Log the library's debug messages to stderr (never a secret).")
    var verbose = false

    package init() {}

    package func validate() throws {
        if let problem = Self.problem(keystore: keystore) { throw ValidationError(problem) }
    }

    /// What `validate()` refuses, worded as argument-parser prints it; `nil` when valid.
    static func problem(keystore: String?) -> String? {
        if let keystore, keystore.isEmpty { return "--keystore must not be empty" }
        return nil
    }

    /// A debug logger to stderr with `--verbose`, else none.
    package var logger: Logger? { Self.logger(verbose: verbose) }

    static func logger(verbose: Bool) -> Logger? {
        guard verbose else { return nil }
        var logger = Logger(label: "federate", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = .debug
        return logger
    }
}

/// The options that name a keystore and one of its access groups: all that `rekey` takes,
/// which works on every session of the group and never calls the network; the subcommands
/// of one session take them within ``CommonOptions``.
package struct KeystoreOptions: ParsableArguments {
    @OptionGroup var location: KeystoreLocationOptions

    @Option(
        name: .customLong("access-group"),
        help: ArgumentHelp("The keystore access group shared through a Unix group; omit for items private to you.", valueName: "GROUP"))
    var accessGroup: String?

    package init() {}

    package func validate() throws {
        if let problem = Self.problem(accessGroup: accessGroup) { throw ValidationError(problem) }
    }

    /// `--keystore`.
    var keystore: String? { location.keystore }
    /// `--verbose`.
    var verbose: Bool { location.verbose }
    /// A debug logger to stderr with `--verbose`, else none.
    package var logger: Logger? { location.logger }

    /// What `validate()` refuses, worded as argument-parser prints it; `nil` when valid.
    static func problem(accessGroup: String?) -> String? {
        if let accessGroup, accessGroup.isEmpty {
            return "--access-group must not be empty (omit it for the private keystore)"
        }
        if let accessGroup, let problem = groupNameProblem(accessGroup, option: "--access-group") {
            return problem
        }
        return nil
    }

    /// Why `name` cannot name an access group (too long), worded for `option`; `nil` when it can.
    static func groupNameProblem(_ name: String, option: String) -> String? {
        guard name.utf8.count > AccessGroup.maximumNameBytes else { return nil }
        return "\(option) takes a group name of at most \(AccessGroup.maximumNameBytes) bytes, not \(name.utf8.count)"
    }
}
