#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CSQLite

extension KeystoreError {
    /// Maps an SQLite result code to a ``KeystoreError`` carrying the code and SQLite's message
    /// (which names tables and constraints, never bound values, so no item value can leak).
    static func sqlite(_ code: Int32, connection: OpaquePointer?, path: String, operation: String) -> KeystoreError {
        let message: String
        if let connection, let text = sqlite3_errmsg(connection) {
            message = String(cString: text)
        } else if let text = sqlite3_errstr(code) {
            message = String(cString: text)
        } else {
            message = "unknown error"
        }
        let reason = "\(operation) failed: SQLite error \(code) (\(message))"
        let systemErrno = connection.map { sqlite3_system_errno($0) }.flatMap { $0 == 0 ? nil : $0 }
        let primary = code & 0xFF
        if primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY || primary == SQLITE_IOERR, ReadOnlyFileSystem.holds(path) {
            // SQLite's own errno is of a later fallback (ENOENT opening a `-wal` it could not
            // create): the mount is the cause, and no retry helps.
            return KeystoreError(
                .io, "\(reason): the keystore directory is on a file system mounted read-only, and SQLite creates the database's -wal and -shm files beside it even to read",
                path: path, errno: EROFS)
        }
        switch primary {
        case SQLITE_BUSY, SQLITE_LOCKED, SQLITE_CANTOPEN:
            return KeystoreError(.storeUnavailable, reason, path: path, errno: systemErrno)
        case SQLITE_FULL:
            return KeystoreError(.io, reason, path: path, errno: ENOSPC)
        case SQLITE_TOOBIG:
            return KeystoreError(
                .corruptFormat, "\(reason): an item, key or row is larger than the keystore's limit of \(SQLiteConnection.maximumLength) bytes",
                path: path)
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return KeystoreError(.corruptFormat, reason, path: path)
        case SQLITE_PERM, SQLITE_AUTH:
            return KeystoreError(.insecurePermissions, reason, path: path, errno: systemErrno)
        case SQLITE_READONLY:
            // Our own file we cannot write: a permission problem on disk, reported with errno.
            return KeystoreError(.io, reason, path: path, errno: systemErrno ?? EACCES)
        default:
            return KeystoreError(.io, reason, path: path, errno: systemErrno)
        }
    }
}
