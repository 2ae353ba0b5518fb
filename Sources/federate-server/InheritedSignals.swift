import CProcessSpawn
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The job-control signals `federate-server` was started with ignored (`nohup` ignores
/// SIGHUP; a shell starts a script's background job with SIGINT and SIGQUIT ignored),
/// recorded before anything installs a handler. As across `exec`, they stay ignored:
/// `federate exec` neither traps nor forwards them, and its command starts with them ignored
/// too. Other signals start at their default whatever `federate` inherited: a SIGPIPE that a
/// runtime ignored for itself (Python's, a test runner's) would otherwise leak into the
/// command, as Python's own `subprocess` takes care to avoid.
enum InheritedSignals {
    private static let recorded = Mutex<Set<Int32>>([])
    /// The signals whose inherited `SIG_IGN` is kept.
    static let kept: [Int32] = [SIGHUP, SIGINT, SIGQUIT]

    /// Records which of ``kept`` are ignored now. Call first thing in `main`.
    static func record() {
        let ignored = kept.filter { ib_signal_is_ignored($0) != 0 }
        recorded.withLock { $0 = Set(ignored) }
    }

    /// What ``record()`` found ignored.
    static var ignoredAtStart: Set<Int32> { recorded.withLock { $0 } }
}
