package import ArgumentParser
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
