/// Rotates the key of one namespace of the SQLite engine: seals the key check with the sealing
/// key, then re-seals with it every item an opening key opens, a few hundred per transaction.
///
/// Nothing is made (a key file, a salt) before one of the keys that exist has opened the
/// check: a rotation no key given may start changes nothing. The check moves first, so that
/// a second rotation to another key started meanwhile is refused, and each batch checks, under
/// the write lock, that it has not moved since (two rotations at once stop rather than split
/// the items between two keys). Each transaction holds the write lock for one batch only, so
/// the namespace's writers keep committing between batches; an item they write with an older
/// key after its batch passed is re-sealed by the next rotation. A rotation that stops
/// half-way (a crash, a full disk) leaves every item opening with one of the keys, and
/// running it again completes it. Values keep their versions, and no change is recorded: what
/// an item holds does not change, so no client's cache needs it again.
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
    /// Told the counts so far after each batch: a rotation of many items takes a while.
    var progress: (KeyRotation) -> Void = { _ in }

    private static let updateValue = "UPDATE items SET value = ?1 WHERE id = ?2"

    func run() throws(KeystoreError) -> KeyRotation {
        guard try layout.prepareNamespaceFiles(group, create: false) != nil else { return KeyRotation() }
        // Authority first, with the keys that exist; the sealing key is made (a key file moved
        // aside to be replaced, a salt) only once the check or an item has opened.
        var proof = try StoreNamespace.open(layout: layout, group: group, keySource: keySource, create: .nothing)
        let sealingKeyExists = proof != nil
        for candidate in keySource.openingOnly where proof == nil {
            proof = try StoreNamespace.open(layout: layout, group: group, keySource: candidate, create: .nothing)
        }
        guard var namespace = proof else {
            throw KeystoreError(
                .invalidKey,
                "none of the keys given exists for \(KeyCheck.describe(service: layout.service, group: group)) (no key file or passphrase salt): "
                    + "nothing can open its items",
                path: layout.databasePath(group))
        }
        let connection = try namespace.connect(service: layout.service, busyTimeout: busyTimeout)
        defer { connection.close() }
        guard try namespace.mayStartRotation(on: connection, service: layout.service) else { return KeyRotation() }
        if !sealingKeyExists {
            guard let made = try StoreNamespace.open(layout: layout, group: group, keySource: keySource, create: .sealingKeyOverProvenItems) else {
                throw KeystoreError(.io, "the namespace vanished while its key was made", path: layout.databasePath(group))
            }
            namespace = made
        }
        guard try namespace.moveKeyCheckForRotation(on: connection, service: layout.service) else { return KeyRotation() }
        let batchSize = max(1, itemsPerTransaction)
        var rotation = KeyRotation()
        rotation.keyCheckMoved = true
        // From the lowest row ID, then after the last one read.
        var last: Int64?
        while true {
            var batch = KeyRotation()
            let (read, end) = try connection.immediateTransaction { () throws(KeystoreError) -> (Int, Int64?) in
                try namespace.requireKeyCheckStillSealing(on: connection, service: layout.service)
                let ids = try StoreSchema.itemIds(after: last, limit: batchSize, on: connection)
                // One row in memory at a time: a member of a shared group can plant rows of
                // up to the connection's limit (1 MiB) each.
                for id in ids {
                    let row: (key: String, version: Int64?, sealed: [UInt8]?)?
                    do throws(KeystoreError) {
                        row = try StoreSchema.item(byId: id, on: connection)
                    } catch where error.code == .corruptFormat {
                        // A key over the length limit: no item, and no name to report.
                        batch.unreadable += 1
                        continue
                    }
                    // A key no item can have (a member's plant): skipped, as every scan does.
                    guard let row else { continue }
                    guard let sealed = row.sealed, var opened = try? namespace.keys.open(sealed, binding: namespace.binding, forKey: row.key) else {
                        batch.noteUnreadable(row.key)
                        continue
                    }
                    defer { CryptoRuntime.cleanse(&opened.value) }
                    guard opened.opener == .opening else {
                        batch.alreadySealed += 1
                        continue
                    }
                    let resealed = try namespace.seal(opened.value, forKey: row.key)
                    try connection.withStatement(Self.updateValue) { statement throws(KeystoreError) in
                        try statement.bind(1, blob: resealed)
                        try statement.bind(2, int64: id)
                        _ = try statement.step()
                    }
                    batch.resealed += 1
                }
                return (ids.count, ids.last)
            }
            // Counted once the batch committed: a failed one changed nothing.
            rotation.add(batch)
            guard read == batchSize, let end else { break }
            last = end
            progress(rotation)
            try checkpoint(end)
        }
        return rotation
    }
}
