#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension StoreLayout {
    /// The files SQLite opens next to a database; a planted one could redirect or hang it.
    static let siblingSuffixes = ["-wal", "-shm", "-journal"]

    /// ``prepareDirectories(_:create:)`` and then ``prepareDatabase(_:create:)`` for `group`:
    /// the database's path, or `nil` when a directory or the database is missing and `create`
    /// is off.
    func prepareNamespaceFiles(_ group: AccessGroup, create: Bool) throws(KeystoreError) -> String? {
        guard try prepareDirectories(group, create: create) else { return nil }
        return try prepareDatabase(group, create: create)
    }

    /// Checks the database of `group` and its siblings before SQLite opens them, and creates
    /// the database when missing and `create` is on. Returns the path, or `nil` when the
    /// database is missing and `create` is off.
    ///
    /// Anything that exists and is not a regular file is refused; creation uses `O_EXCL |
    /// O_NOFOLLOW | O_NONBLOCK`, so nothing can be followed or block, and `fchmod` so the
    /// umask cannot narrow a shared database.
    func prepareDatabase(_ group: AccessGroup, create: Bool) throws(KeystoreError) -> String? {
        let path = databasePath(group)
        let shared = group.isShared
        let mode = Self.databaseMode(shared: shared)
        for suffix in Self.siblingSuffixes {
            if let info = try status(path + suffix) {
                try checkFile(info, path: path + suffix, shared: shared, mode: mode, what: "database file")
            }
        }
        for _ in 0..<3 {
            if let info = try status(path) {
                try checkFile(info, path: path, shared: shared, mode: mode, what: "database")
                return path
            }
            guard create else { return nil }
            let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode)
            if fd < 0 {
                if errno == EEXIST || errno == EINTR { continue }
                throw KeystoreError.io("open", path: path)
            }
            defer { close(fd) }
            guard fchmod(fd, mode) == 0 else { throw KeystoreError.io("fchmod", path: path) }
            try KeystoreError.rethrowing { try POSIX.fsyncDirectory(namespaceDirectory(group)) }
            return path
        }
        throw KeystoreError(.io, "database keeps changing while it is created", path: path, errno: EEXIST)
    }
}
