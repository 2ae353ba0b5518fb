import CSQLite

/// A borrowed prepared statement: binding, stepping and reading columns. Only valid inside
/// ``SQLiteConnection/withStatement(_:_:)``.
struct SQLiteStatement {
    let statement: OpaquePointer
    let connection: SQLiteConnection

    func bind(_ index: Int32, text: String) throws(KeystoreError) {
        // utf8CString keeps any embedded NUL and ends with one; the count excludes the last.
        let result = text.utf8CString.withUnsafeBufferPointer {
            ib_sqlite3_bind_text_transient(statement, index, $0.baseAddress, Int32($0.count - 1))
        }
        guard result == SQLITE_OK else { throw connection.error(result, "binding a value") }
    }

    func bind(_ index: Int32, blob: [UInt8]) throws(KeystoreError) {
        // SQLite takes an Int32 count; past the connection's limit it refuses anyway.
        guard blob.count <= SQLiteConnection.maximumLength else {
            throw KeystoreError(
                .valueTooLarge, "the sealed value is larger than the keystore's limit of \(SQLiteConnection.maximumLength) bytes",
                path: connection.path)
        }
        // A nil pointer would bind NULL; an empty blob still needs a valid one.
        let result = blob.isEmpty
            ? sqlite3_bind_zeroblob(statement, index, 0)
            : blob.withUnsafeBytes { ib_sqlite3_bind_blob_transient(statement, index, $0.baseAddress, Int32($0.count)) }
        guard result == SQLITE_OK else { throw connection.error(result, "binding a value") }
    }

    func bind(_ index: Int32, int64: Int64?) throws(KeystoreError) {
        let result = int64.map { sqlite3_bind_int64(statement, index, $0) } ?? sqlite3_bind_null(statement, index)
        guard result == SQLITE_OK else { throw connection.error(result, "binding a value") }
    }

    /// Advances to the next row; `false` when the statement is done.
    func step() throws(KeystoreError) -> Bool {
        let result = sqlite3_step(statement)
        switch result {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw connection.error(result, "executing a statement")
        }
    }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(statement, column) == SQLITE_NULL }

    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(statement, column) }

    func text(_ column: Int32) -> String {
        guard let pointer = sqlite3_column_text(statement, column) else { return "" }
        let count = Int(sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    func blob(_ column: Int32) -> [UInt8] {
        let pointer = sqlite3_column_blob(statement, column)
        let count = Int(sqlite3_column_bytes(statement, column))
        guard let pointer, count > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}
