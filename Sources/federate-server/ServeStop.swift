import FederateCLI
import ServiceLifecycle
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// How `federate serve` stops on the signals ``StopSignals`` trapped:
/// - one that came before ``init(trap:)`` or while the keystore opens ends the process at
///   once with 0: nothing was printed, nothing is served;
/// - once the server runs (``serving(_:)``), the first triggers the service group's
///   graceful shutdown; a SIGINT after it ends a shutdown that hangs (the terminal's second
///   Ctrl-C, 130); a SIGTERM after it changes nothing, so a supervisor that sends it twice
///   still sees 0.
final class ServeStop: Sendable {
    private enum Phase {
        case starting
        case serving(ServiceGroup)
        case stopping
    }

    private let phase = Mutex(Phase.starting)
    private let trap: SignalRelay

    /// Ends the process if a stop is already waiting, else watches for one.
    init(trap: SignalRelay) {
        self.trap = trap
        // Taken here, not by the watching thread, which may not have run by the time the
        // server listens: a stop sent before `serve` started must not print the variables.
        if trap.pendingStop() != nil { Self.endNow() }
        trap.onFirstSignal { [self] _ in stopRequested() }
    }

    /// The server runs in `group`; a stop from now on shuts it down gracefully.
    func serving(_ group: ServiceGroup) {
        phase.withLock { phase in
            if case .starting = phase { phase = .serving(group) }
        }
    }

    /// Whether a stop came (then nothing more is printed).
    var isStopping: Bool {
        phase.withLock { phase in
            if case .stopping = phase { return true }
            return false
        }
    }

    private func stopRequested() {
        let group = phase.withLock { phase -> ServiceGroup? in
            defer { phase = .stopping }
            if case .serving(let group) = phase { return group }
            return nil
        }
        guard let group else { Self.endNow() }
        trap.release([SIGINT])
        Task { await group.triggerGracefulShutdown() }
    }

    /// Exit 0 while the keystore may still be opening: `_exit`, as a signal would end it, so
    /// no exit handler runs beside the threads still at work (SQLite and PostgreSQL take an
    /// ended process as they take a killed one).
    private static func endNow() -> Never {
        _exit(0)
    }
}
