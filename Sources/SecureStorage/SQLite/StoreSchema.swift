/// The schema of one namespace's database and the connection settings every writer uses.
///
/// `meta` records the schema version (so later releases can migrate), the service and group
/// the database belongs to (a database copied under another name is refused), and, in a
/// user's private database, the service's last access group. `changes` is the change feed's
/// log: one row per changed key per commit, tagged with the committing instance's origin.
///
/// Both tables are rowid tables because a commit writes whole pages to the WAL, and every
/// page it touches is written, synced, read again by readers and copied by the checkpoint.
/// Version 1 kept items in a `WITHOUT ROWID` table keyed by name: a ~1.3 KB sealed session is a
/// large cell there, so inserting one in the middle of the key order overflowed a leaf and
/// rebalanced it with its siblings, and 8 KiB pages were needed to keep items inline. A
/// commit of one new session wrote 5.3 pages of 8 KiB (44 KB) to the WAL. In a rowid table
/// new rows go to the right-most leaf, the key is a small cell in its own index, and leaves
/// keep up to `page size - 35` bytes inline, so 4 KiB pages do: 3.9 pages of 4 KiB (16 KB)
/// for a new session, 2 (8 KB) for an update, against 3 of 8 KiB (25 KB). The change log has
/// no `AUTOINCREMENT` (whose `sqlite_sequence` row cost one more page per commit): its newest
/// row is never trimmed, so sequence numbers never go back, and a reader that sees them go
/// back anyway (the log was emptied by hand) reloads everything.
enum StoreSchema {
    static let version = 2
    /// The page size of databases created from now on (see ``install(on:service:group:)``).
    static let pageSize = 4096

    static let createMeta = "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL)"
    static let statements = """
        CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, version INTEGER, value BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS changes(seq INTEGER PRIMARY KEY, key TEXT NOT NULL, origin INTEGER NOT NULL);
        """

    /// Rebuilds a version 1 database's tables in the version 2 layout, keeping every item and
    /// every change-log row (with its sequence number, so change-feed cursors stay valid).
    static let upgradeFromVersion1 = """
        CREATE TABLE items_v2(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, version INTEGER, value BLOB NOT NULL);
        INSERT INTO items_v2(key, version, value) SELECT key, version, value FROM items ORDER BY key;
        DROP TABLE items;
        ALTER TABLE items_v2 RENAME TO items;
        CREATE TABLE changes_v2(seq INTEGER PRIMARY KEY, key TEXT NOT NULL, origin INTEGER NOT NULL);
        INSERT INTO changes_v2(seq, key, origin) SELECT seq, key, origin FROM changes;
        DROP TABLE changes;
        ALTER TABLE changes_v2 RENAME TO changes;
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
    /// A migration's deletion of a row it copied (by ID, and its key, which it copied it under).
    static let deleteById = "DELETE FROM items WHERE id = ?1 AND key = ?2"
    static let insertChange = "INSERT INTO changes(key, origin) VALUES(?1, ?2)"
    static let selectValue = "SELECT value FROM items WHERE key = ?1"
    static let replaceRaw = "INSERT OR REPLACE INTO items(key, version, value) VALUES(?1, ?3, ?2)"
    /// Whether a row's key is one the keystore could have written: text of at most
    /// ``StoreLayout/maximumKeyBytes`` bytes. A member of a shared group can plant keys of up
    /// to the connection's length limit (1 MiB) in the items and the change log; listed, a few
    /// thousand would hold gigabytes, and no such item can be read or written by its key.
    private static let plausibleKey = "typeof(key) = 'text' AND length(CAST(key AS BLOB)) <= \(StoreLayout.maximumKeyBytes)"
    static let selectKeys = "SELECT key FROM items WHERE \(plausibleKey)"
    static let selectKeyById = "SELECT key FROM items WHERE id = ?1 AND \(plausibleKey)"
    /// Row IDs after `?1`, at most `?2` of them (a negative limit is none), in the table's
    /// own order: with `NOT INDEXED` SQLite walks the table's keys (the IDs), where the
    /// covering index on `key` it would otherwise pick loads every key, a planted one of a
    /// gigabyte included, to find the ID at its end.
    static let selectItemIds = "SELECT id FROM items NOT INDEXED WHERE id > ?1 ORDER BY id LIMIT ?2"
    /// The first row IDs, from the lowest (a planted row may have ID `Int64.min`, which no
    /// "after" bound includes).
    static let selectFirstItemIds = "SELECT id FROM items NOT INDEXED ORDER BY id LIMIT ?1"
    /// An item's key, version and value; a value over the connection's length limit comes
    /// back NULL (its length is read from the row's header, the value never loaded), so one
    /// oversized value a member planted fails its own item and not the whole scan. (A key
    /// over the limit still fails the statement: SQLite 3.40 loads text to measure it. See
    /// ``everyItem(_:byId:on:_:)``.)
    private static let itemColumns = """
        key, version, CASE WHEN typeof(value) = 'blob' AND length(value) <= \(SQLiteConnection.maximumLength) THEN value END
        """
    static let selectItemById = "SELECT \(itemColumns) FROM items WHERE id = ?1 AND \(plausibleKey)"
    static let selectMeta = "SELECT value FROM meta WHERE name = ?1"
    static let upsertMeta = "INSERT INTO meta(name, value) VALUES(?1, ?2) ON CONFLICT(name) DO UPDATE SET value = excluded.value"
    /// Two subqueries, not `SELECT min(seq), max(seq)`: SQLite answers a lone min() or max()
    /// of the primary key from one end of the b-tree, but both in one query scan the whole
    /// log (100,000s of rows after large batches, at every open and every poll).
    static let changeBounds = "SELECT (SELECT min(seq) FROM changes), (SELECT max(seq) FROM changes)"
    /// The changed keys after a sequence number; NULL for an implausible key (a member's
    /// forgery), which the poller reports as ``KeystoreChange/all`` without loading it.
    static let changesSince = """
        SELECT seq, CASE WHEN \(plausibleKey) THEN key END FROM changes WHERE seq > ?1 AND origin != ?2 ORDER BY seq
        """
    static let trimChanges = "DELETE FROM changes WHERE seq <= ?1"

    /// Writer settings (WAL, fully synchronous commits), then the tables and the meta rows,
    /// checked against `service` and `group`; a version 1 database is upgraded in the same
    /// transaction, so it is either wholly upgraded or untouched.
    static func install(on connection: SQLiteConnection, service: String, group: AccessGroup) throws(KeystoreError) {
        // A database this release cannot read is refused before anything about it changes,
        // its journal mode included (the checks below run in a transaction that rolls back,
        // but switching to WAL does not).
        if try connection.withStatement(hasMeta, { statement throws(KeystoreError) in try statement.step() }),
           let foundVersion = try meta("schema_version", on: connection) {
            _ = try checkVersion(foundVersion, path: connection.path)
        }
        // Before anything is written (a database that has pages keeps its size, so one made
        // by version 1 keeps its 8 KiB pages).
        try connection.execute("PRAGMA page_size=\(pageSize)")
        try connection.withStatement("PRAGMA journal_mode=WAL") { statement throws(KeystoreError) in
            guard try statement.step(), statement.text(0).lowercased() == "wal" else {
                throw KeystoreError(.storeUnavailable, "the database could not switch to WAL mode", path: connection.path)
            }
        }
        try connection.applySetting("PRAGMA synchronous=FULL")
        try connection.immediateTransaction { () throws(KeystoreError) in
            // Read before the other CREATEs: they skip a version 1 database's tables by name.
            try connection.execute(createMeta)
            let foundVersion = try meta("schema_version", on: connection)
            try connection.execute(statements)
            if let foundVersion {
                if try checkVersion(foundVersion, path: connection.path) == 1 {
                    try connection.executeOnCheckedSchema(upgradeFromVersion1)
                    try setMeta("schema_version", "\(version)", on: connection)
                }
            } else {
                try setMeta("schema_version", "\(version)", on: connection)
            }
            for (name, value) in expectedMeta(service: service, group: group) {
                guard let found = try meta(name, on: connection) else {
                    try setMeta(name, value, on: connection)
                    continue
                }
                try check(name, found: found, expected: value, path: connection.path)
            }
            try checkObjects(on: connection)
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
        // Every statement above and below was prepared after `checkObjects` passed, in the
        // snapshot the schema was loaded from (``SQLiteConnection/withStatement(_:_:)``).
        guard tables == 3, let foundVersion = try meta("schema_version", on: connection),
              try checkVersion(foundVersion, path: connection.path) == version
        else { return false }
        for (name, value) in expectedMeta(service: service, group: group) {
            guard let found = try meta(name, on: connection) else { return false }
            try check(name, found: found, expected: value, path: connection.path)
        }
        return true
    }

    /// Refuses a database whose schema holds anything the keystore does not make: a table
    /// whose definition differs in any way from one a release created (a CHECK constraint, a
    /// default or a generated column runs an expression in every statement that touches the
    /// table, and built-in functions can take hours on a 1 MiB string), a trigger, a view, a
    /// virtual table, another table or index. A shared group's database is writable by every
    /// member, and its schema runs in every member's process: ``SQLiteConnection`` prepares
    /// statements only against a schema that passed this check. The object's name is not
    /// quoted: it is text a member chose.
    static func checkObjects(on connection: SQLiteConnection) throws(KeystoreError) {
        try connection.withUncheckedStatement(schemaObjects) { statement throws(KeystoreError) in
            while try statement.step() {
                let type = statement.text(0)
                let name = statement.text(1)
                let table = statement.text(2)
                let expected: Bool
                switch type {
                case "table": expected = name == table && knownTables[name]?.contains(normalised(statement.text(3))) == true
                case "index": expected = statement.isNull(3) && name == "sqlite_autoindex_\(table)_1" && (table == "meta" || table == "items")
                default: expected = false
                }
                guard expected else {
                    let what = ["table", "index", "trigger", "view"].contains(type) ? type : "schema object"
                    throw KeystoreError(
                        .corruptFormat,
                        "the database holds a \(what) this keystore does not make: someone who can write it changed its schema; "
                            + "remove it, or restore the database",
                        path: connection.path)
                }
            }
        }
    }

    /// Every table definition a release of this keystore has created, as SQLite stores it
    /// (``normalised(_:)``): version 2's, version 1's (read once, by the upgrade), and
    /// `sqlite_sequence`, which version 1's change log left and SQLite does not drop.
    private static let knownTables: [String: Set<String>] = [
        "meta": ["CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT NOT NULL)"],
        "items": [
            "CREATE TABLE items(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, version INTEGER, value BLOB NOT NULL)",
            "CREATE TABLE items(key TEXT PRIMARY KEY, version INTEGER, value BLOB NOT NULL) WITHOUT ROWID",
        ],
        "changes": [
            "CREATE TABLE changes(seq INTEGER PRIMARY KEY, key TEXT NOT NULL, origin INTEGER NOT NULL)",
            "CREATE TABLE changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, origin INTEGER NOT NULL)",
        ],
        "sqlite_sequence": ["CREATE TABLE sqlite_sequence(name,seq)"],
    ]

    /// A stored definition with the quotes `ALTER TABLE … RENAME` puts around the new name
    /// (`CREATE TABLE "items"(…)`, as the version 1 upgrade leaves it) removed.
    private static func normalised(_ sql: String) -> String {
        for name in ["items", "changes", "meta"] where sql.hasPrefix("CREATE TABLE \"\(name)\"(") {
            return "CREATE TABLE \(name)" + sql.dropFirst("CREATE TABLE \"\(name)\"".count)
        }
        return sql
    }

    private static let schemaObjects = "SELECT type, name, tbl_name, sql FROM sqlite_master"

    private static let hasMeta = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"

    private static let installedTables =
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'items', 'changes')"

    /// The meta rows besides the schema version that a database of `service` and `group`
    /// holds, in the order they are checked (the version is checked first), so the first
    /// mismatch reported is the same whoever checks.
    private static func expectedMeta(service: String, group: AccessGroup) -> [(String, String)] {
        [("access_group", encode(group)), ("service", service)]
    }

    /// The stored schema version; throws for one this release cannot read (newer, or not a
    /// version at all).
    private static func checkVersion(_ found: String, path: String) throws(KeystoreError) -> Int {
        // `found` is text from a file a group member can write: only a parsed number is quoted.
        guard let stored = Int(found) else {
            throw KeystoreError(.corruptFormat, "database schema version is not a number", path: path)
        }
        guard stored >= 1 else {
            throw KeystoreError(.corruptFormat, "database schema version \(stored) is not a version any release wrote", path: path)
        }
        guard stored <= version else {
            throw KeystoreError(.corruptFormat, "database schema version \(stored) is newer than this release supports (\(version))", path: path)
        }
        return stored
    }

    /// Compares bytes, as paths and associated data do: `String`'s `==` takes canonically
    /// equivalent spellings (`café` precomposed and decomposed) for one service or group.
    private static func check(_ name: String, found: String, expected: String, path: String) throws(KeystoreError) {
        guard !found.utf8.elementsEqual(expected.utf8) else { return }
        throw KeystoreError(.corruptFormat, "database belongs to another \(name == "service" ? "service" : "access group")", path: path)
    }

    /// Whether the database holds a key check or an item: anything sealed with a key. A
    /// database whose schema is not installed yet holds neither.
    static func holdsSealedData(on connection: SQLiteConnection) throws(KeystoreError) -> Bool {
        let tables = try connection.withStatement(sealingTables) { statement throws(KeystoreError) -> Set<String> in
            var names: Set<String> = []
            while try statement.step() { names.insert(statement.text(0)) }
            return names
        }
        if tables.contains("meta"), try meta(StoreNamespace.keyCheckName, on: connection) != nil { return true }
        guard tables.contains("items") else { return false }
        return try connection.withStatement("SELECT 1 FROM items LIMIT 1") { statement throws(KeystoreError) -> Bool in try statement.step() }
    }

    private static let sealingTables = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'items')"

    static func meta(_ name: String, on connection: SQLiteConnection) throws(KeystoreError) -> String? {
        try connection.withStatement(selectMeta) { statement throws(KeystoreError) -> String? in
            try statement.bind(1, text: name)
            return try statement.step() ? statement.text(0) : nil
        }
    }

    /// The sealed row of `key` as stored, or `nil`.
    static func sealedValue(forKey key: String, on connection: SQLiteConnection) throws(KeystoreError) -> [UInt8]? {
        try connection.withStatement(selectValue) { statement throws(KeystoreError) -> [UInt8]? in
            try statement.bind(1, text: key)
            return try statement.step() ? statement.blob(0) : nil
        }
    }

    /// Writes `sealed` as the row of `key` as it is, with `version` (none when `nil`) and no
    /// change-log row (what someone who can write the file could do; for tests).
    static func replaceSealedValue(_ sealed: [UInt8], forKey key: String, version: Int64? = nil, on connection: SQLiteConnection) throws(KeystoreError) {
        try connection.withStatement(replaceRaw) { statement throws(KeystoreError) in
            try statement.bind(1, text: key)
            try statement.bind(2, blob: sealed)
            try statement.bind(3, int64: version)
            _ = try statement.step()
        }
    }

    static func setMeta(_ name: String, _ value: String, on connection: SQLiteConnection) throws(KeystoreError) {
        try connection.withStatement(upsertMeta) { statement throws(KeystoreError) in
            try statement.bind(1, text: name)
            try statement.bind(2, text: value)
            _ = try statement.step()
        }
    }

    /// The IDs of the items after row ID `after`, or from the lowest when `nil` (SQLite takes
    /// any 64-bit ID, 0, negative ones and `Int64.min` included), at most `limit` of them, in
    /// ID order. Scans that must not load a member's planted keys read IDs here, then each row
    /// by ``item(byId:on:)``.
    static func itemIds(after: Int64? = nil, limit: Int? = nil, on connection: SQLiteConnection) throws(KeystoreError) -> [Int64] {
        try connection.withStatement(after == nil ? selectFirstItemIds : selectItemIds) { statement throws(KeystoreError) -> [Int64] in
            var index: Int32 = 1
            if let after {
                try statement.bind(1, int64: after)
                index = 2
            }
            try statement.bind(index, int64: limit.map { Int64(max(1, $0)) } ?? -1)
            var ids: [Int64] = []
            while try statement.step() { ids.append(statement.int64(0)) }
            return ids
        }
    }

    /// An item's row by its ID: `nil` when there is none, or its key is not one the keystore
    /// could have written (a member's plant, skipped as every scan skips it); its value is
    /// `nil` when it is not a value of at most the connection's length limit. A key over
    /// that limit fails with ``KeystoreError/Code/corruptFormat``.
    static func item(byId id: Int64, on connection: SQLiteConnection) throws(KeystoreError) -> (key: String, version: Int64?, sealed: [UInt8]?)? {
        try connection.withStatement(selectItemById) { statement throws(KeystoreError) -> (key: String, version: Int64?, sealed: [UInt8]?)? in
            try statement.bind(1, int64: id)
            guard try statement.step() else { return nil }
            return (statement.text(0), statement.isNull(1) ? nil : statement.int64(1), statement.isNull(2) ? nil : statement.blob(2))
        }
    }

    /// Every item's row: through `scan`, one statement over the table; when a row fails it
    /// (a key over the length limit, which a member of a shared group can plant, or a damaged
    /// row), item by item instead, by row ID in one read transaction, leaving out the rows
    /// that cannot be read, so that such a row fails only itself. Returns the rows and how
    /// many were left out. `lookup` is `scan`'s statement for the one row `?1`.
    static func everyItem<Row>(
        _ scan: String,
        byId lookup: String,
        on connection: SQLiteConnection,
        _ row: (SQLiteStatement) -> Row
    ) throws(KeystoreError) -> (rows: [Row], unreadable: Int) {
        do throws(KeystoreError) {
            let rows = try connection.withStatement(scan) { statement throws(KeystoreError) -> [Row] in
                var rows: [Row] = []
                while try statement.step() { rows.append(row(statement)) }
                return rows
            }
            return (rows, 0)
        } catch where error.code == .corruptFormat {
            // One snapshot for the IDs and the rows: the caller's transaction when it has one
            // (a migration holds the source's write lock), else a read transaction.
            let inTransaction = !connection.isAutocommit
            return try connection.transactionUnless(inTransaction) { () throws(KeystoreError) -> (rows: [Row], unreadable: Int) in
                let ids = try itemIds(on: connection)
                var rows: [Row] = []
                var unreadable = 0
                for id in ids {
                    do throws(KeystoreError) {
                        let found = try connection.withStatement(lookup) { statement throws(KeystoreError) -> Row? in
                            try statement.bind(1, int64: id)
                            return try statement.step() ? row(statement) : nil
                        }
                        if let found { rows.append(found) }
                    } catch where error.code == .corruptFormat {
                        unreadable += 1
                    }
                }
                return (rows, unreadable)
            }
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
