import CProcessSpawn
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `serve`'s SIGINT and SIGTERM, trapped before `main` first waits: a stop that arrives
/// before the server runs (even while `federate` was starting: it hands `serve` over with
/// both blocked, and they stay pending across `execv`) waits in the trap, and `serve` then
/// stops and exits 0. swift-service-lifecycle's signal handling could not do this: it
/// installs itself only once the service group runs, and sets the signals to `SIG_IGN`
/// first, which discards one that is pending.
enum StopSignals {
    /// Whether this process runs `serve`.
    private static var isServe: Bool {
        guard CommandLine.argc > 1, let first = CommandLine.unsafeArgv[1] else { return false }
        return strcmp(first, "serve") == 0
    }

    /// The trap, when this process runs `serve` and it could be set (else `serve` falls back
    /// to the service group's own signal handling).
    static let serve: SignalRelay? = isServe ? try? SignalRelay(trapping: [SIGINT, SIGTERM]) : nil

    /// Sets ``serve`` for a `serve` command line, then unblocks the two signals `federate`
    /// blocked for the hand-over. Call first thing in `main`, before it waits.
    static func trapForServe() {
        guard isServe else { return }
        _ = serve
        var stops = sigset_t()
        sigemptyset(&stops)
        sigaddset(&stops, SIGINT)
        sigaddset(&stops, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &stops, nil)
    }
}
