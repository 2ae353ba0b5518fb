/// The schema of one namespace's database and the connection settings every writer uses.
///
/// `meta` records the schema version (so later releases can migrate), the service and group
/// the database belongs to (a database copied under another name is refused), and, in a
/// user's private database, the service's last access group. `changes` is the change feed's
/// log: one row per changed key per commit, tagged with the committing instance's origin.
enum StoreSchema {
    static let version = 1
    /// The page size of databases created from now on (see ``install(on:service:group:)``).
    static let pageSize = 8192

    static let statements = """
        CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS items(key TEXT PRIMARY KEY, version INTEGER, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, origin INTEGER NOT NULL);
        """

    // MARK: Statements shared by the writer, readers, poller and migration

    /// A versioned write applies when there is no item, either side is unversioned, or the
    /// stored version is not newer; `sqlite3_changes` then says whether it applied.
    static let upsert = """
        INSERT INTO items(key, version, value) VALUES(?1, ?2, ?3)
        ON CONFLICT(key) DO UPDATE SET version = excluded.version, value = excluded.value
        WHERE items.version IS NULL OR excluded.version IS NULL OR items.version <= excluded.version
        """
    static let delete = "DELETE FROM items WHERE key = ?1"
    static let deleteIfUnchanged = "DELETE FROM items WHERE key = ?1 AND value = ?2"
    static let insertChange = "INSERT INTO changes(key, origin) VALUES(?1, ?2)"
    static let selectValue = "SELECT value FROM items WHERE key = ?1"
    static let selectKeys = "SELECT key FROM items"
    static let selectItems = "SELECT key, version, value FROM items"
    static let selectMeta = "SELECT value FROM meta WHERE name = ?1"
    static let upsertMeta = "INSERT INTO meta(name, value) VALUES(?1, ?2) ON CONFLICT(name) DO UPDATE SET value = excluded.value"
    /// Two subqueries, not `SELECT min(seq), max(seq)`: SQLite answers a lone min() or max()
    /// of the primary key from one end of the b-tree, but both in one query scan the whole
    /// log (100,000s of rows after large batches, at every open and every poll).
    static let changeBounds = "SELECT (SELECT min(seq) FROM changes), (SELECT max(seq) FROM changes)"
    static let changesSince = "SELECT seq, key FROM changes WHERE seq > ?1 AND origin != ?2 ORDER BY seq"
    static let trimChanges = "DELETE FROM changes WHERE seq <= (SELECT max(seq) FROM changes) - ?1"

    /// Writer settings (WAL, fully synchronous commits), then the tables and the meta rows,
    /// checked against `service` and `group`.
    static func install(on connection: SQLiteConnection, service: String, group: AccessGroup) throws(KeystoreError) {
        // Before anything is written (it is ignored by a database that has pages already):
        // a sealed session is ~1.3 KB, more than the ~1,000 bytes a 4 KiB page of a WITHOUT
        // ROWID table keeps inline, so with SQLite's default every item spilled into an
        // overflow page of its own (~4.6 KB on disk and in the page cache per item). 8 KiB
        // pages keep items up to ~2,000 bytes inline: a third of the pages to read, write,
        // cache and checkpoint.
        try connection.execute("PRAGMA page_size=\(pageSize)")
        try connection.withStatement("PRAGMA journal_mode=WAL") { statement throws(KeystoreError) in
            guard try statement.step(), statement.text(0).lowercased() == "wal" else {
                throw KeystoreError(.storeUnavailable, "the database could not switch to WAL mode", path: connection.path)
            }
        }
        try connection.execute("PRAGMA synchronous=FULL")
        try connection.immediateTransaction { () throws(KeystoreError) in
            try connection.execute(statements)
            for (name, value) in expectedMeta(service: service, group: group) {
                guard let found = try meta(name, on: connection) else {
                    try setMeta(name, value, on: connection)
                    continue
                }
                try check(name, found: found, expected: value, path: connection.path)
            }
        }
    }

    /// Whether ``install(on:service:group:)`` would change nothing: WAL mode, the tables and
    /// every meta row present. Throws as it does for a database of another service, group or
    /// a newer schema; `false` leaves the rest (creating, recording) to a full open.
    static func isInstalled(on connection: SQLiteConnection, service: String, group: AccessGroup) throws(KeystoreError) -> Bool {
        let wal = try connection.withStatement("PRAGMA journal_mode") { statement throws(KeystoreError) -> Bool in
            try statement.step() && statement.text(0).lowercased() == "wal"
        }
        guard wal else { return false }
        let tables = try connection.withStatement(installedTables) { statement throws(KeystoreError) -> Int64 in
            _ = try statement.step()
            return statement.int64(0)
        }
        guard tables == 3 else { return false }
        for (name, value) in expectedMeta(service: service, group: group) {
            guard let found = try meta(name, on: connection) else { return false }
            try check(name, found: found, expected: value, path: connection.path)
        }
        return true
    }

    private static let installedTables =
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'items', 'changes')"

    /// The meta rows a database of `service` and `group` holds, in the order they are checked
    /// (so the first mismatch reported is the same whoever checks).
    private static func expectedMeta(service: String, group: AccessGroup) -> [(String, String)] {
        [("access_group", encode(group)), ("schema_version", "\(version)"), ("service", service)]
    }

    private static func check(_ name: String, found: String, expected: String, path: String) throws(KeystoreError) {
        if name == "schema_version" {
            guard let stored = Int(found), stored <= version else {
                throw KeystoreError(.corruptFormat, "database schema version \(found) is newer than this release supports (\(version))", path: path)
            }
        } else if found != expected {
            throw KeystoreError(.corruptFormat, "database belongs to another \(name == "service" ? "service" : "access group")", path: path)
        }
    }

    static func meta(_ name: String, on connection: SQLiteConnection) throws(KeystoreError) -> String? {
        try connection.withStatement(selectMeta) { statement throws(KeystoreError) -> String? in
            try statement.bind(1, text: name)
            return try statement.step() ? statement.text(0) : nil
        }
    }

    static func setMeta(_ name: String, _ value: String, on connection: SQLiteConnection) throws(KeystoreError) {
        try connection.withStatement(upsertMeta) { statement throws(KeystoreError) in
            try statement.bind(1, text: name)
            try statement.bind(2, text: value)
            _ = try statement.step()
        }
    }

    static func appendChange(_ key: String, origin: Int64, on connection: SQLiteConnection) throws(KeystoreError) {
        try connection.withStatement(insertChange) { statement throws(KeystoreError) in
            try statement.bind(1, text: key)
            try statement.bind(2, int64: origin)
            _ = try statement.step()
        }
    }

    // MARK: Access groups in meta

    static func encode(_ group: AccessGroup) -> String {
        guard let name = group.name else { return "none" }
        return "group:" + Base64.urlEncode(name.utf8)
    }

    static func decodeGroup(_ text: String) -> AccessGroup? {
        if text == "none" { return AccessGroup.none }
        guard text.hasPrefix("group:"),
              let bytes = Base64.urlDecode(String(text.dropFirst(6))), !bytes.isEmpty,
              let name = String(validating: bytes, as: UTF8.self)
        else { return nil }
        return AccessGroup(name: name)
    }
}
