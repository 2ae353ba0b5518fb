import CProcessSpawn
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The signals `federate-server` was started with ignored (`nohup` ignores SIGHUP; a shell
/// starts a background job of a script with SIGINT and SIGQUIT ignored), recorded before
/// anything installs a handler. As POSIX has it for `exec`, they stay ignored: `federate
/// exec` neither traps nor forwards them, and its command starts with them ignored too.
/// SIGCHLD is left out: ignored, it would have the kernel reap children unseen.
enum InheritedSignals {
    private static let recorded = Mutex<Set<Int32>>([])

    /// Records the signals ignored now. Call first thing in `main`.
    static func record() {
        let ignored = (1..<32).map(Int32.init).filter { $0 != SIGCHLD && ib_signal_is_ignored($0) != 0 }
        recorded.withLock { $0 = Set(ignored) }
    }

    /// What ``record()`` found ignored.
    static var ignoredAtStart: Set<Int32> { recorded.withLock { $0 } }
}
