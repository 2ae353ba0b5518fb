package import ArgumentParser
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `federate`'s ``ServerSide``: replaces the process with `federate-server`, found next to
/// this executable, and the same arguments and environment (git's way with its helpers), so
/// `federate exec`, `federate serve` and `--keystore postgres://…` behave as documented
/// while `federate` itself links neither NIO nor postgres-nio.
///
/// Reached only after parsing and validation, before anything is written to stdout, so the
/// sibling parses the same command line again and reports every error itself. A missing
/// sibling is a broken installation: one line on stderr and exit 1.
package struct SiblingServer: ServerSide {
    package init() {}

    /// The sibling's file name.
    static let executableName = "federate-server"

    package func exec(_ command: Exec) async throws(CLIFailure) -> Never { try Self.handOver() }
    package func serve(_ command: Serve) async throws(CLIFailure) { try Self.handOver() }
    package func postgresTarget(url: String) throws(CLIFailure) -> any PostgresTarget { try Self.handOver() }
    package func closeKeystores() async {}

    /// `exec`, `serve`, and any command whose keystore (`--keystore`, else
    /// `$IDENTITY_BROKER_KEYSTORE`) is a `postgres://` URL, go to the sibling whole: a token
    /// read from stdin must be read there, not here.
    package func prepare(_ command: any ParsableCommand) throws(CLIFailure) {
        if command is Exec || command is Serve { try Self.handOver() }
        guard let keystoreCommand = command as? any KeystoreCommand else { return }
        try prepare(keystore: keystoreCommand.location.keystore)
    }

    package func prepare(keystore: String?) throws(CLIFailure) {
        guard let root = try? KeystoreAccess.resolveRoot(explicit: keystore) else { return }
        if root.hasPrefix("postgres://") || root.hasPrefix("postgresql://") { try Self.handOver() }
    }

    /// Hands `federate serve …` to the sibling first thing, before anything is parsed, with
    /// SIGINT and SIGTERM blocked: a stop sent while `federate` starts stays pending across
    /// `execv` until `federate-server` traps it (``StopSignals`` there), so `serve` stopped at
    /// once still exits 0 instead of being killed (143). Returns, with the mask as it was,
    /// only when the sibling cannot be started; the usual path then reports that.
    package static func handOverServeAtOnce() {
        guard CommandLine.argc > 1, let first = CommandLine.unsafeArgv[1], strcmp(first, "serve") == 0 else { return }
        var stops = sigset_t()
        sigemptyset(&stops)
        sigaddset(&stops, SIGINT)
        sigaddset(&stops, SIGTERM)
        var previous = sigset_t()
        pthread_sigmask(SIG_BLOCK, &stops, &previous)
        _ = try? handOver()
        pthread_sigmask(SIG_SETMASK, &previous, nil)
    }

    private static func handOver() throws(CLIFailure) -> Never {
        let directory = executableDirectory()
        let path = directory + "/" + executableName
        // The arguments as the kernel passed them, not `CommandLine.arguments`, which replaces
        // bytes that are not UTF-8: exec's command must reach the sibling unchanged.
        let passed = (1..<max(Int(CommandLine.argc), 1)).map { CommandLine.unsafeArgv[$0] }
        let argv = [strdup(path)] + passed + [nil]
        execv(path, argv)
        let code = errno
        throw CLIFailure(
            .internalError,
            "cannot start \(path): \(String(cString: strerror(code))); 'exec', 'serve' and postgres:// keystores need \(executableName) installed next to federate")
    }

    /// The directory of this executable (`/proc/self/exe`, symlinks resolved), else of argv[0].
    private static func executableDirectory() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        let path = length > 0
            ? String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            : (CommandLine.arguments.first ?? "")
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
