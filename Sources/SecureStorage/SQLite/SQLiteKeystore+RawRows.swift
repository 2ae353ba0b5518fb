extension SQLiteKeystore {
    /// The sealed row of `key` as it is stored, or `nil`: for tests that act as someone who can
    /// write the database file (a tampered or foreign row), never for reading an item.
    package func storedRow(forKey key: String) throws(KeystoreError) -> [UInt8]? {
        let connection = try SQLiteConnection(path: namespace.databasePath, busyTimeout: configuration.busyTimeout)
        defer { connection.close() }
        return try connection.withStatement(StoreSchema.selectValue) { statement throws(KeystoreError) -> [UInt8]? in
            try statement.bind(1, text: key)
            return try statement.step() ? statement.blob(0) : nil
        }
    }

    /// Writes `sealed` as the row of `key` unchanged, without sealing or a change-log entry: for
    /// tests that act as someone who can write the database file.
    package func replaceStoredRow(_ sealed: [UInt8], forKey key: String) throws(KeystoreError) {
        let connection = try SQLiteConnection(path: namespace.databasePath, busyTimeout: configuration.busyTimeout)
        defer { connection.close() }
        try connection.withStatement("INSERT OR REPLACE INTO items(key, version, value) VALUES(?1, NULL, ?2)") { statement throws(KeystoreError) in
            try statement.bind(1, text: key)
            try statement.bind(2, blob: sealed)
            _ = try statement.step()
        }
    }
}
