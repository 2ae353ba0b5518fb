/// Moves a service's items from one access group's database to another's.
///
/// Every source item is opened with the source key first; if any cannot be, nothing moves;
/// and the target key must open the target's key check (``StoreNamespace/verifyKey(on:service:)``).
/// Then one transaction on the target upserts every item re-sealed for its new name (versions
/// kept, a newer target item wins), with change rows, and reads each back; a second
/// transaction on the source deletes each item only if its ciphertext is unchanged, so an item
/// rewritten meanwhile is not lost. A crash between the two leaves both copies, and running
/// the migration again completes it: no progress marker is needed.
struct StoreMigration {
    let layout: StoreLayout
    let from: AccessGroup
    let to: AccessGroup
    let keySource: KeySource
    let busyTimeout: Duration
    /// Called at `copied` and `deleted` (after each transaction), for crash tests.
    var checkpoint: (String) -> Void = { _ in }

    private struct SourceItem {
        let key: String
        let version: Int64?
        let sealed: [UInt8]
        var plaintext: [UInt8]
    }

    /// Returns how many items left the source.
    func run() throws(KeystoreError) -> Int {
        guard from != to else { return 0 }
        guard let source = try StoreNamespace.open(layout: layout, group: from, keySource: keySource, create: false) else {
            return 0
        }
        let sourceConnection = try source.connect(service: layout.service, busyTimeout: busyTimeout)
        defer { sourceConnection.close() }
        var items = try read(source, on: sourceConnection)
        defer { for index in items.indices { CryptoRuntime.cleanse(&items[index].plaintext) } }
        guard !items.isEmpty else { return 0 }

        guard let target = try StoreNamespace.open(layout: layout, group: to, keySource: keySource, create: true) else {
            throw KeystoreError(.invalidKey, "no key available for the target access group")
        }
        let targetConnection = try target.connect(service: layout.service, busyTimeout: busyTimeout)
        defer { targetConnection.close() }
        // The source key opened every item above; the target's is checked before anything is
        // copied, so items never move into a namespace under a key its other items do not have.
        try target.verifyKey(on: targetConnection, service: layout.service)
        let origin = try KeystoreError.rethrowing { try CryptoRuntime.randomBytes(8).reduce(Int64(0)) { $0 << 8 | Int64($1) } }

        try targetConnection.immediateTransaction { () throws(KeystoreError) in
            for item in items {
                let sealed = try target.seal(item.plaintext, forKey: item.key)
                try targetConnection.withStatement(StoreSchema.upsert) { statement throws(KeystoreError) in
                    try statement.bind(1, text: item.key)
                    try statement.bind(2, int64: item.version)
                    try statement.bind(3, blob: sealed)
                    _ = try statement.step()
                }
                let applied = targetConnection.changes > 0
                if applied { try StoreSchema.appendChange(item.key, origin: origin, on: targetConnection) }
                let stored = try StoreSchema.sealedValue(forKey: item.key, on: targetConnection)
                guard let stored else {
                    throw KeystoreError(.migrationFailed, "item '\(item.key)' is missing after the copy; nothing was moved", path: target.databasePath)
                }
                var copy = try target.open(stored, forKey: item.key)
                defer { CryptoRuntime.cleanse(&copy) }
                // A newer target item (higher version) legitimately differs from the source.
                if applied && copy != item.plaintext {
                    throw KeystoreError(.migrationFailed, "item '\(item.key)' did not read back identically; nothing was moved", path: target.databasePath)
                }
            }
        }
        checkpoint("copied")

        let moved = try sourceConnection.immediateTransaction { () throws(KeystoreError) -> Int in
            var moved = 0
            for item in items {
                try sourceConnection.withStatement(StoreSchema.deleteIfUnchanged) { statement throws(KeystoreError) in
                    try statement.bind(1, text: item.key)
                    try statement.bind(2, blob: item.sealed)
                    _ = try statement.step()
                }
                if sourceConnection.changes > 0 {
                    moved += 1
                    try StoreSchema.appendChange(item.key, origin: origin, on: sourceConnection)
                }
            }
            return moved
        }
        checkpoint("deleted")
        return moved
    }

    /// Reads and opens every source item; throws, naming how many failed, before anything moves.
    private func read(_ source: StoreNamespace, on connection: SQLiteConnection) throws(KeystoreError) -> [SourceItem] {
        let rows = try connection.withStatement(StoreSchema.selectItems) { statement throws(KeystoreError) -> [(String, Int64?, [UInt8])] in
            var rows: [(String, Int64?, [UInt8])] = []
            while try statement.step() {
                rows.append((statement.text(0), statement.isNull(1) ? nil : statement.int64(1), statement.blob(2)))
            }
            return rows
        }
        var items: [SourceItem] = []
        var failures: [KeystoreError] = []
        for (key, version, sealed) in rows {
            do {
                items.append(SourceItem(key: key, version: version, sealed: sealed, plaintext: try source.open(sealed, forKey: key)))
            } catch {
                failures.append(error)
            }
        }
        if let first = failures.first {
            for index in items.indices { CryptoRuntime.cleanse(&items[index].plaintext) }
            throw KeystoreError(
                first.code,
                "\(failures.count) of \(rows.count) items cannot be opened with the source key (first: \(first.reason)); nothing was moved",
                path: source.databasePath
            )
        }
        return items
    }
}
