extension SQLiteKeystore {
    /// The sealed row of `key` as it is stored, or `nil`: for tests that act as someone who can
    /// write the database file (a tampered or foreign row), never for reading an item.
    package func storedRow(forKey key: String) throws(KeystoreError) -> [UInt8]? {
        try withRawConnection { connection throws(KeystoreError) in try StoreSchema.sealedValue(forKey: key, on: connection) }
    }

    /// Writes `sealed` as the row of `key` unchanged, without sealing or a change-log entry: for
    /// tests that act as someone who can write the database file.
    package func replaceStoredRow(_ sealed: [UInt8], forKey key: String, version: Int64? = nil) throws(KeystoreError) {
        try withRawConnection { connection throws(KeystoreError) in
            try StoreSchema.replaceSealedValue(sealed, forKey: key, version: version, on: connection)
        }
    }

    /// Writes `value` as the row of `key`, sealed for this namespace but with `otherKey`: a row
    /// planted by someone who can write the file (a process with that key is refused at open).
    package func replaceStoredRow(sealing value: [UInt8], withKey otherKey: [UInt8], forKey key: String, version: Int64? = nil) throws(KeystoreError) {
        let sealed = try namespace.binding.seal(value, with: SecretBytes(copying: otherKey), forKey: key)
        try replaceStoredRow(sealed, forKey: key, version: version)
    }

    /// Every row of the database at `path`, key and sealed value by key, read without opening a
    /// keystore (no key, no check, nothing moved or created): for tests that compare a
    /// database before and after a command.
    package static func storedRows(ofDatabase path: String) throws(KeystoreError) -> [(key: String, sealed: [UInt8])] {
        try withRawConnection(to: path, busyTimeout: .seconds(5)) { connection throws(KeystoreError) in
            try connection.withStatement("SELECT key, value FROM items ORDER BY key") { statement throws(KeystoreError) in
                var rows: [(key: String, sealed: [UInt8])] = []
                while try statement.step() { rows.append((statement.text(0), statement.blob(1))) }
                return rows
            }
        }
    }

    private func withRawConnection<T>(_ body: (SQLiteConnection) throws(KeystoreError) -> T) throws(KeystoreError) -> T {
        try Self.withRawConnection(to: namespace.databasePath, busyTimeout: configuration.busyTimeout, body)
    }

    private static func withRawConnection<T>(
        to path: String, busyTimeout: Duration, _ body: (SQLiteConnection) throws(KeystoreError) -> T
    ) throws(KeystoreError) -> T {
        let connection = try SQLiteConnection(path: path, busyTimeout: busyTimeout)
        defer { connection.close() }
        return try body(connection)
    }
}
