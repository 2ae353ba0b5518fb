import CProcessSpawn
import FederateCLI

/// `federate-server`: the whole `federate` CLI, with the credential server (`exec`, `serve`)
/// and the PostgreSQL engine linked in. `federate` replaces itself with this executable for
/// those, so that its own start-up, run by AWS SDKs before every call, links neither
/// (docs/architecture.md, "The CLI's two executables").
@main
enum FederateServer {
    static func main() async {
        // As `federate` does (its exec into this executable made the process dumpable again;
        // run directly, nothing filled its closed standard descriptors).
        // It matters most here: `exec`'s command and `serve`'s clients run as the same user,
        // and could otherwise read this process's memory and /proc/<pid>/environ, which hold
        // the keystore key.
        _ = ib_start_process()
        RawArguments.hideKeystorePasswords()
        InheritedDescriptors.record()
        InheritedSignals.record()
        StopSignals.trapForServe()
        await Federate.main(serverSide: LinkedServerSide())
    }
}

/// The ``ServerSide`` that runs the work in this process.
struct LinkedServerSide: ServerSide {
    func exec(_ command: Exec) async throws(CLIFailure) -> Never { try await ExecRunner.run(command) }
    func serve(_ command: Serve) async throws(CLIFailure) { try await ServeRunner.run(command) }
    func postgresTarget(url: String) throws(CLIFailure) -> any PostgresTarget { try PostgresURL(url: url) }
    func closeKeystores() async { await OpenKeystores.closeAll() }
}
