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
/// sent to the whole foreground process group when the command is in that group and so got
/// them already: one Ctrl-C must reach it once, not twice.
///
/// The terminal sends SIGINT (Ctrl-C) to its foreground process group, `federate`'s: the
/// command got it too only if it is still in that group (`exec -- setsid cmd` is not). On a
/// hang-up it sends SIGHUP to the session leader alone, and to the foreground group only
/// once the leader exits: when `federate` leads the session (`ssh -t host federate exec …`,
/// a terminal multiplexer's window command), it must forward that one. Signals another
/// process sends to the whole group (`kill -- -PGID`, a shell's hang-up of its jobs) look
/// like any `kill` and reach the command twice; nothing tells them apart.
///
/// A signal handler (C, `ib_signal_relay_install`) writes each signal and its `si_code` to a
/// pipe; a thread of its own reads them and calls `kill`. Installed before the command starts,
/// so no signal between the start and the forwarding is lost: they wait in the pipe. Each
/// record says whether the command had started: a Ctrl-C from just before is forwarded, as
/// the terminal sent it to a process group the command was not in yet.
final class SignalRelay: Sendable {
    /// Why the signals could not be trapped.
    struct SetupFailure: Error {
        /// `errno` from `pipe2` or `sigaction`.
        var code: Int32
    }

    private let readEnd: Int32
    private let signals: [Int32]
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
        self.signals = signals
    }

    /// A signal that arrived before the command started (each trapped one would have ended
    /// `federate` untrapped, so each asks to stop), taken from the pipe without waiting;
    /// `nil` when none did. Call before starting the command, so that a Ctrl-C typed
    /// meanwhile does not go unheard.
    func pendingStop() -> Int32? {
        let flags = fcntl(readEnd, F_GETFL)
        _ = fcntl(readEnd, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(readEnd, F_SETFL, flags) }
        var found: Int32?
        while let record = Self.nextRecord(from: readEnd) {
            if found == nil { found = record.signal }
        }
        return found
    }

    /// Forwards what arrived so far and everything after to `child`, on a thread of its own.
    /// Call as soon as `child` has started; start it with `ib_signal_relay_command_started` as
    /// its `whenForked`, which tells signals that reached it from those that came before it.
    func forward(to child: ChildProcess) {
        target.withLock { $0 = child }
        let descriptor = readEnd
        // A serial queue of its own gets a thread of its own (an overcommitting one), which may
        // block in `read` for the command's lifetime without taking a cooperative thread.
        DispatchQueue(label: "federate.exec.signals").async { self.relay(from: descriptor) }
    }

    /// Calls `action`, once and on a thread of its own, with the first signal trapped since
    /// `init` (at once when one already was).
    func onFirstSignal(_ action: @escaping @Sendable (Int32) -> Void) {
        let descriptor = readEnd
        DispatchQueue(label: "federate.serve.signals").async {
            if let record = Self.nextRecord(from: descriptor) { action(record.signal) }
        }
    }

    /// Gives `released` (some of the trapped signals) their default actions back.
    func release(_ released: [Int32]) {
        ib_signal_relay_uninstall(released, Int32(released.count))
    }

    /// Stops forwarding and gives the signals their default actions back, so that a Ctrl-C
    /// while `federate` shuts down (the server, a PostgreSQL pool) ends it.
    func stop() {
        target.withLock { $0 = nil }
        // The command's end may have come before this process's copy of the terminal's
        // signal that ended it was handled: it must not meet the default action.
        ib_signal_relay_settle(signals, Int32(signals.count))
        ib_signal_relay_uninstall(signals, Int32(signals.count))
    }

    /// Whether the terminal that sent `signal` to this process sent it to `child` as well.
    private static func terminalReached(_ child: ChildProcess, with signal: Int32) -> Bool {
        guard signal != SIGTERM, getpgid(child.pid) == getpgrp() else { return false }
        // A hang-up goes to the session leader alone.
        return !(signal == SIGHUP && getsid(0) == getpid())
    }

    private func relay(from descriptor: Int32) {
        let fromTerminal = ib_si_kernel()
        while let record = Self.nextRecord(from: descriptor) {
            target.withLock { child in
                guard let child else { return }
                // A terminal's signal that came before the command started never reached it.
                if record.code == fromTerminal && record.afterStart && Self.terminalReached(child, with: record.signal) { return }
                child.send(record.signal)
            }
        }
    }

    /// One signal as the handler recorded it (`ib_signal_relay_install`).
    private struct Record {
        var signal: Int32
        /// `si_code`: `SI_KERNEL` when a terminal sent it.
        var code: Int32
        /// Whether it came once the command had started (``forward(to:)``).
        var afterStart: Bool
    }

    /// The next record on the pipe; `nil` at its end, or when a non-blocking read finds none.
    private static func nextRecord(from descriptor: Int32) -> Record? {
        var fields: (Int32, Int32, Int32) = (0, 0, 0)
        while true {
            let count = withUnsafeMutableBytes(of: &fields) { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count == MemoryLayout<(Int32, Int32, Int32)>.size else { return nil }
            return Record(signal: fields.0, code: fields.1, afterStart: fields.2 != 0)
        }
    }
}
