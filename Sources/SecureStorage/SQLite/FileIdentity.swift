#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Which file a path names: its device and inode.
///
/// A database file renamed over, or removed, while a keystore has it open stays the file the
/// keystore's connections read and write; only the path moves on. Comparing the identity
/// recorded at open with the path's tells the two apart (SQLite's `SQLITE_FCNTL_HAS_MOVED`
/// does the same for one connection).
struct FileIdentity: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64

    /// The identity of the file at `path` (a final symbolic link not followed), or `nil` when
    /// nothing is there.
    ///
    /// - Throws: when the path cannot be examined (a permission changed on the way, say): the
    ///   caller cannot tell either way.
    static func of(_ path: String) throws(KeystoreError) -> FileIdentity? {
        let info = try KeystoreError.rethrowing { try POSIX.status(path) }
        return info.map { FileIdentity(device: UInt64($0.st_dev), inode: UInt64($0.st_ino)) }
    }
}
