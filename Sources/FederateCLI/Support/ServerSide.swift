package import ArgumentParser
package import Logging
package import SecureStorage
import Synchronization

/// What only `federate-server` links: the credential server (`exec`, `serve`; Hummingbird and
/// SwiftNIO) and the PostgreSQL engine (postgres-nio).
///
/// `federate credentials` runs before every AWS call, and linking those libraries made every
/// start slower: more to relocate and, above all, every protocol-conformance lookup (the
/// argument parser makes many) scans each conformance record of the image (see
/// docs/performance.md, 5b). So the commands live here, in FederateCLI, and reach that code
/// only through this protocol: `federate-server` implements it, while `federate`'s
/// ``SiblingServer`` replaces the process with `federate-server` and the same arguments.
package protocol ServerSide: Sendable {
    /// Runs `federate exec`; ends the process with the command's status.
    func exec(_ command: Exec) async throws(CLIFailure) -> Never
    /// Runs `federate serve` until SIGINT/SIGTERM.
    func serve(_ command: Serve) async throws(CLIFailure)
    /// A parsed `postgres://` keystore URL.
    func postgresTarget(url: String) throws(CLIFailure) -> any PostgresTarget
    /// Closes the PostgreSQL keystores this process opened; returns at once when there is none.
    func closeKeystores() async
    /// Called once the command line is parsed and valid, before the command runs (and so
    /// before it reads stdin or writes anything): where the work needs this side, the
    /// front door hands the whole run over here.
    func prepare(_ command: any ParsableCommand) throws(CLIFailure)
    /// ``prepare(_:)`` for a `credentials` command line read without argument-parser
    /// (``CredentialsCommandLine``): `keystore` is its `--keystore`, when given.
    func prepare(keystore: String?) throws(CLIFailure)
}

extension ServerSide {
    package func prepare(_ command: any ParsableCommand) throws(CLIFailure) {}
    package func prepare(keystore: String?) throws(CLIFailure) {}
}

/// The subcommands that open a keystore, with the options that name it.
protocol KeystoreCommand {
    var common: CommonOptions { get }
}

extension Login: KeystoreCommand {}
extension Guest: KeystoreCommand {}
extension Credentials: KeystoreCommand {}
extension Status: KeystoreCommand {}
extension Clear: KeystoreCommand {}
extension Migrate: KeystoreCommand {}
extension Exec: KeystoreCommand {}
extension Serve: KeystoreCommand {}

/// The ``ServerSide`` this process runs with: ``SiblingServer`` unless
/// ``Federate/main(serverSide:)`` installed another before parsing.
enum ActiveServerSide {
    private static let installed = Mutex<any ServerSide>(SiblingServer())

    static var current: any ServerSide { installed.withLock { $0 } }

    static func install(_ side: any ServerSide) { installed.withLock { $0 = side } }
}

extension Federate {
    /// Runs the CLI with `serverSide` for `exec`, `serve` and PostgreSQL keystores.
    package static func main(serverSide: any ServerSide) async {
        ActiveServerSide.install(serverSide)
        await main()
    }
}

/// A `postgres://` (or `postgresql://`) keystore as `federate-server` parsed it: its password
/// is registered with ``Terminal`` before anything can print it.
package protocol PostgresTarget: Sendable {
    /// `postgres://user@host:port/db?sslmode=…`: never the password.
    var displayName: String { get }
    /// `$IDENTITY_BROKER_KEY_FILE`, when set.
    var keyFilePath: String? { get }
    /// Opens (creating the schema on first use) the keystore for `use`; the process closes it
    /// before exiting.
    func open(
        service: String, accessGroup: AccessGroup, keySource: KeySource, use: KeystoreAccess.KeystoreUse, logger: Logger?
    ) async throws(CLIFailure) -> any Keystore
    /// Moves every saved session from access group `source` to `target`; how many moved.
    func migrate(
        service: String, from source: AccessGroup, to target: AccessGroup, keySource: KeySource, logger: Logger?, context: String
    ) async throws(CLIFailure) -> Int
}
