import CProcessSpawn
import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Forwards the signals `federate exec` receives to its command, except those the terminal
/// sent to the whole foreground process group, which the command (in the same group) got
/// already: one Ctrl-C must reach it once, not twice.
///
/// A signal handler (C, `ib_signal_relay_install`) writes each signal and its `si_code` to a
/// pipe; a thread of its own reads them and calls `kill`. Installed before the command starts,
/// so no signal between the start and the forwarding is lost: they wait in the pipe.
final class SignalRelay: Sendable {
    /// Why the signals could not be trapped.
    struct SetupFailure: Error {
        /// `errno` from `pipe2` or `sigaction`.
        var code: Int32
    }

    private let readEnd: Int32
    /// The child to forward to; `nil` before ``forward(to:)`` and after ``stop()``. Held
    /// while a signal is sent, so ``stop()`` returns only once no `kill` can still be on its
    /// way to a process ID the caller is about to reap.
    private let target = Mutex<ChildProcess?>(nil)

    /// Traps `signals` from now on.
    init(trapping signals: [Int32]) throws(SetupFailure) {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw SetupFailure(code: errno) }
        // Close-on-exec for other spawners (exec's command starts with only 0, 1 and 2 anyway).
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        let code = ib_signal_relay_install(ends[1], signals, Int32(signals.count))
        guard code == 0 else { throw SetupFailure(code: code) }
        readEnd = ends[0]
    }

    /// Forwards what arrived so far and everything after to `child`, on a thread of its own.
    func forward(to child: ChildProcess) {
        target.withLock { $0 = child }
        let descriptor = readEnd
        // A serial queue of its own gets a thread of its own (an overcommitting one), which may
        // block in `read` for the command's lifetime without taking a cooperative thread.
        DispatchQueue(label: "federate.exec.signals").async { self.relay(from: descriptor) }
    }

    /// Stops forwarding. The handler stays installed (the process is about to exit), so
    /// later signals are still trapped, and dropped.
    func stop() {
        target.withLock { $0 = nil }
    }

    private func relay(from descriptor: Int32) {
        let fromTerminal = ib_si_kernel()
        var record: (Int32, Int32) = (0, 0)
        while true {
            let count = withUnsafeMutableBytes(of: &record) { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count == MemoryLayout<(Int32, Int32)>.size else { return }
            let (signal, code) = record
            // SIGTERM never comes from a terminal; SIGINT and SIGHUP do, to the whole group.
            if code == fromTerminal && signal != SIGTERM { continue }
            target.withLock { $0?.send(signal) }
        }
    }
}
