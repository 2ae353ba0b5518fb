#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An exclusive advisory `flock(2)` on a lock file, serialising writers across processes and
/// threads. Each acquisition opens its own file description, so two threads of one process
/// exclude each other just like two processes do.
///
/// The lock file is opened read-only (`flock` needs no write access): in a shared group
/// directory it is 0640 and may belong to another member of the Unix group.
struct NamespaceLock {
    let path: String
    let mode: mode_t
    let timeout: Duration

    /// Runs `body` while holding the lock, or throws ``KeystoreError/Code/lockTimeout``.
    func withLock<R>(_ body: () throws -> R) throws -> R {
        guard let fd = try POSIX.openFile(path, O_RDONLY | O_CREAT | O_NOFOLLOW, mode: mode) else {
            throw KeystoreError.io("open", path: path, errno: ENOENT)
        }
        defer { POSIX.closeFile(fd) }
        try acquire(fd)
        defer { _ = flock(fd, LOCK_UN) }
        return try body()
    }

    private func acquire(_ fd: Int32) throws {
        let (seconds, attoseconds) = timeout.components
        let budget = UInt64(max(seconds, 0)) * 1_000_000_000 + UInt64(max(attoseconds, 0) / 1_000_000_000)
        let deadline = POSIX.monotonicNanoseconds() + budget
        var pause: UInt32 = 50
        while true {
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { return }
            let code = errno
            guard code == EWOULDBLOCK || code == EINTR else {
                throw KeystoreError.io("flock", path: path, errno: code)
            }
            if POSIX.monotonicNanoseconds() >= deadline {
                throw KeystoreError(.lockTimeout, "timed out waiting for the writer lock", path: path)
            }
            POSIX.sleep(microseconds: pause)
            pause = min(pause * 2, 5_000)
        }
    }

    /// Takes the lock only if it is free right now; runs `body` and returns `true`, or returns
    /// `false` without running it.
    func withLockIfAvailable(_ body: () throws -> Void) throws -> Bool {
        guard let fd = try POSIX.openFile(path, O_RDONLY | O_CREAT | O_NOFOLLOW, mode: mode) else { return false }
        defer { POSIX.closeFile(fd) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { return false }
        defer { _ = flock(fd, LOCK_UN) }
        try body()
        return true
    }
}
