#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Whether the database file at a keystore's path is still the one its connections opened.
///
/// A database file renamed over, or removed, while a keystore has it open stays the file the
/// keystore's connections read and write; only the path moves on, and SQLite itself only logs
/// it. Commits check this themselves under the write lock (`SQLITE_FCNTL_HAS_MOVED`); reads and
/// the change feed ask this watch, which compares the path's inode with the one recorded at
/// open, as SQLite does (`stat`, inode only), at most once per ``interval``. Once replaced, it
/// stays replaced: the file now at the path is one this keystore never checked or opened.
final class DatabaseFileWatch: Sendable {
    /// The least time between two looks at the path (a `stat` each).
    static let interval: Duration = .milliseconds(100)

    private let path: String
    private let inode: UInt64?
    private let replaced = Atomic<Bool>(false)
    /// When the path was last looked at, in nanoseconds of the continuous clock since `start`.
    private let lastLook = Atomic<Int64>(0)
    private let start = ContinuousClock.now

    /// Records the inode of the file at `path` now; `nil` (nothing there) leaves the watch
    /// blind, which the open that follows turns into an error anyway.
    init(path: String) {
        self.path = path
        self.inode = Self.inode(at: path)
    }

    /// Whether the file at the path was found replaced or removed, looking again when the
    /// last look is older than ``interval``.
    var isReplaced: Bool {
        if replaced.load(ordering: .relaxed) { return true }
        let now = (ContinuousClock.now - start).wholeNanoseconds
        let last = lastLook.load(ordering: .relaxed)
        guard now - last >= Self.interval.wholeNanoseconds,
              lastLook.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
        else { return false }
        return lookNow()
    }

    /// Looks at the path now; `true` when it names another file or none.
    @discardableResult
    func lookNow() -> Bool {
        if replaced.load(ordering: .relaxed) { return true }
        guard let inode else { return false }
        var info = stat()
        if stat(path, &info) != 0 {
            // Gone: replaced. Any other failure (a permission changed on the way) says nothing.
            guard errno == ENOENT || errno == ENOTDIR else { return false }
        } else if UInt64(info.st_ino) == inode {
            return false
        }
        replaced.store(true, ordering: .relaxed)
        return true
    }

    private static func inode(at path: String) -> UInt64? {
        var info = stat()
        return stat(path, &info) == 0 ? UInt64(info.st_ino) : nil
    }
}
