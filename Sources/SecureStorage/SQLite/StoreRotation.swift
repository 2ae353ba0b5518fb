/// Rotates the key of one namespace of the SQLite engine: re-seals with the sealing key every
/// item an opening key opens, a few hundred per transaction, then seals the key check with it.
///
/// Each transaction holds the write lock for one batch only, so the namespace's writers keep
/// committing between batches; an item they write with an older key after its batch passed is
/// re-sealed by the next rotation. The key check moves last: a rotation that stops half-way
/// (a crash, a full disk) leaves every item opening with one of the keys and the check with
/// the old key, and running it again completes it. Values keep their versions, and no change
/// is recorded: what an item holds does not change, so no client's cache needs it again.
struct StoreRotation {
    let layout: StoreLayout
    let group: AccessGroup
    let keySource: KeySource
    let busyTimeout: Duration
    /// How many items one transaction re-seals at most.
    var itemsPerTransaction = 256
    /// Called after each committed batch with the last row ID it read, for tests: what it
    /// throws stops the rotation there.
    var checkpoint: (Int64) throws(KeystoreError) -> Void = { _ in }

    private static let nextItems = "SELECT id, key, value FROM items WHERE id > ?1 ORDER BY id LIMIT ?2"
    private static let updateValue = "UPDATE items SET value = ?1 WHERE id = ?2"

    func run() throws(KeystoreError) -> KeyRotation {
        // No database, nothing to rotate; one without its key yet (a key file moved aside to
        // be replaced) gets one here: the rotation is what makes it.
        guard try layout.prepareDirectories(group, create: false),
              try layout.prepareDatabase(group, create: false) != nil,
              let namespace = try StoreNamespace.open(layout: layout, group: group, keySource: keySource, create: true)
        else { return KeyRotation() }
        let connection = try namespace.connect(service: layout.service, busyTimeout: busyTimeout)
        defer { connection.close() }
        try namespace.verifyKeyForRotation(on: connection, service: layout.service)
        var rotation = KeyRotation()
        var last: Int64 = 0
        while true {
            var batch = KeyRotation()
            let (read, end) = try connection.immediateTransaction { () throws(KeystoreError) -> (Int, Int64) in
                let rows = try connection.withStatement(Self.nextItems) { statement throws(KeystoreError) -> [(id: Int64, key: String, value: [UInt8])] in
                    try statement.bind(1, int64: last)
                    try statement.bind(2, int64: Int64(itemsPerTransaction))
                    var rows: [(id: Int64, key: String, value: [UInt8])] = []
                    while try statement.step() { rows.append((statement.int64(0), statement.text(1), statement.blob(2))) }
                    return rows
                }
                for row in rows {
                    guard var opened = try? namespace.keys.open(row.value, binding: namespace.binding, forKey: row.key) else {
                        batch.noteUnreadable(row.key)
                        continue
                    }
                    defer { CryptoRuntime.cleanse(&opened.value) }
                    guard opened.opener == .opening else {
                        batch.alreadySealed += 1
                        continue
                    }
                    let sealed = try namespace.seal(opened.value, forKey: row.key)
                    try connection.withStatement(Self.updateValue) { statement throws(KeystoreError) in
                        try statement.bind(1, blob: sealed)
                        try statement.bind(2, int64: row.id)
                        _ = try statement.step()
                    }
                    batch.resealed += 1
                }
                return (rows.count, rows.last?.id ?? last)
            }
            // Counted once the batch committed: a failed one changed nothing.
            rotation.add(batch)
            guard read == itemsPerTransaction else { break }
            last = end
            try checkpoint(last)
        }
        try connection.immediateTransaction { () throws(KeystoreError) in
            try namespace.storeKeyCheck(on: connection)
        }
        return rotation
    }
}
