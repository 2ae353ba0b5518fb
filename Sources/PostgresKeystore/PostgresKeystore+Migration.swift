public import Logging
import PostgresNIO
public import SecureStorage

extension PostgresKeystore {
    /// Moves every item of `service` from access group `from` to `to`, in one transaction.
    ///
    /// Both namespaces are locked against other migrations (their key-check rows) and the
    /// source rows against commits (`FOR UPDATE`),
    /// and every source item is opened with the source key first, the rows streamed (one
    /// plaintext at a time, plus the keys; the second pass holds one chunk's): if any does not open
    /// (tampered, wrong key), nothing moves and the error says how many failed. Each item is
    /// then read again, re-sealed for the target (its associated data names the new group), upserted with
    /// the versioned rule (a newer target item wins), read back, and its source row deleted,
    /// a thousand items per statement;
    /// both namespaces' change feeds are notified. The transaction commits all of it
    /// or none, so no progress marker is needed and running it again is harmless.
    ///
    /// - Parameters:
    ///   - configuration: The server.
    ///   - service: The tool whose items move.
    ///   - from: The access group they leave.
    ///   - to: The access group they join.
    ///   - keySource: The key source; for a passphrase, each group's key is derived from that
    ///     group's salt.
    ///   - logger: A logger for a debug message; never given a secret.
    /// - Returns: How many items left the source (0 when it has none, or `from` and `to` name
    ///   the same group).
    /// - Throws: ``KeystoreError``; on any error nothing has moved, except after the operation
    ///   timeout, when the error says the outcome is unknown (run it again).
    ///   ``KeystoreError/Code/invalidKey`` when a key does not open its group's key check.
    public static func migrate(
        configuration: Configuration,
        service: String,
        from: AccessGroup,
        to: AccessGroup,
        keySource: KeySource,
        logger: Logger? = nil
    ) async throws(KeystoreError) -> Int {
        try configuration.check()
        try PostgresNamespace.validate(service: service, group: from)
        try PostgresNamespace.validate(service: service, group: to)
        guard from != to else { return 0 }
        try CryptoRuntime.ensureInitialised()
        let quiet = logger ?? Logger(label: "IdentityBroker.PostgresKeystore", factory: { _ in SwiftLogNoOpLogHandler() })
        let moved = try await OperationDeadline.run(configuration.operationTimeout, onTimeout: {
            // Statements already sent run on (postgres-nio cannot cancel them), a COMMIT
            // included: the migration may have completed. A rerun moves whatever is left.
            timeout("migrating items (its outcome is unknown: run it again, which moves whatever is left)", configuration)
        }) { () throws(KeystoreError) -> Int in
            // One connection of its own: a migration is a few statements in a row, and a
            // server it cannot reach is reported at once rather than after the timeout.
            try await withOwnConnection(configuration, logger: quiet) { (own) throws(KeystoreError) -> Int in
                let sourceCount: Int
                do {
                    sourceCount = try await own.run(logger: quiet) { connection in
                        _ = try await PostgresSchema.install(on: connection, logger: quiet)
                        let rows = try await connection.query("""
                            SELECT pg_catalog.count(*) FROM identity_broker_items
                            WHERE service = \(service) AND access_group = \(PostgresNamespace.column(for: from))
                            """, logger: quiet).collect()
                        return try rows.first?.decode(Int.self) ?? 0
                    }
                } catch {
                    throw KeystoreError.postgres(error, operation: "reading the source group", configuration: configuration)
                }
                guard sourceCount > 0 else { return 0 }
                let sourceKeys = try await PostgresKeyResolver.keys(
                    for: from, source: keySource, configuration: configuration, connection: own, logger: quiet)
                let targetKeys = try await PostgresKeyResolver.keys(
                    for: to, source: keySource, configuration: configuration, connection: own, logger: quiet)
                try await PostgresKeyCheck.verify(
                    service: service, group: from, keys: sourceKeys, configuration: configuration, connection: own, logger: quiet)
                try await PostgresKeyCheck.verify(
                    service: service, group: to, keys: targetKeys, configuration: configuration, connection: own, logger: quiet)
                let source = PostgresNamespace(service: service, group: from, keys: sourceKeys)
                let target = PostgresNamespace(service: service, group: to, keys: targetKeys)
                let origin = Int64(bitPattern: try KeystoreError.rethrowing {
                    try CryptoRuntime.randomBytes(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                })
                do {
                    return try await own.run(logger: quiet) { connection in
                        try await transaction(on: connection, logger: quiet) {
                            try await move(from: source, to: target, origin: origin, on: connection, logger: quiet)
                        }
                    }
                } catch let error as CommitOutcomeUnknown {
                    throw KeystoreError.postgres(
                        error.underlying, operation: "migrating items (the connection was lost while committing: the outcome is unknown)",
                        configuration: configuration)
                } catch {
                    throw KeystoreError.postgres(error, operation: "migrating items", configuration: configuration)
                }
            }
        }
        logger?.debug("keystore items migrated", metadata: [
            "broker.service": "\(service)",
            "broker.fromGroup": "\(from)",
            "broker.accessGroup": "\(to)",
            "broker.itemCount": "\(moved)",
            "broker.endpoint": "\(configuration.endpoint)",
        ])
        return moved
    }

    /// The values of `keys` in `namespace`, keyed by the keys' bytes; `nil` for a key without
    /// an item.
    private static func readMany(
        _ keys: [String], in namespace: PostgresNamespace, on connection: PostgresConnection, logger: Logger
    ) async throws -> [[UInt8]: ByteBuffer?] {
        let rows = try await PostgresSchema.run(
            PostgresSchema.ReadMany(service: namespace.service, group: namespace.groupColumn, keys: keys), on: connection, logger: logger)
        return Dictionary(rows.map { (Array($0.0.utf8), $0.1) }, uniquingKeysWith: { first, _ in first })
    }

    /// How many items one statement of a migration writes, reads or deletes.
    static let migrationChunk = 1_000

    /// The body of the migration transaction; returns how many items moved.
    private static func move(
        from source: PostgresNamespace, to target: PostgresNamespace, origin: Int64,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> Int {
        // Both namespaces against other migrations (their key-check rows). Commits take no
        // such lock: the item rows' locks order them against the migration, taken here in byte
        // order (`COLLATE "C"`), the order in which commits take theirs (keys sorted by bytes),
        // whatever the database's collation; else a commit and a migration could each hold a
        // row the other waits for.
        try await PostgresSchema.lockForMigration([source, target], on: connection, logger: logger)
        // First pass, streamed (one row in memory at a time): every source row locked and
        // opened with the source key, then let go; only its key and version are kept.
        let rows = try await connection.query("""
            SELECT key, version, \(unescaped: PostgresSchema.cappedValue) FROM identity_broker_items
            WHERE service = \(source.service) AND access_group = \(source.groupColumn)
            ORDER BY key COLLATE "C" FOR UPDATE
            """, logger: logger)
        var items: [(key: String, version: Int64?)] = []
        var failures = 0
        var firstFailure: KeystoreError?
        for try await row in rows {
            let (key, version, buffer) = try row.decode((String, Int64?, ByteBuffer).self)
            do {
                var plaintext = try source.open(Array(buffer.readableBytesView), forKey: key)
                CryptoRuntime.cleanse(&plaintext)
                items.append((key, version))
            } catch {
                failures += 1
                if firstFailure == nil { firstFailure = error }
            }
        }
        if let first = firstFailure {
            throw KeystoreError(
                first.code,
                "\(failures) of \(items.count + failures) items cannot be opened with the source key (first: \(first.reason)); nothing was moved")
        }

        // Then per chunk, three statements rather than three round trips per item (a migration
        // is one call under one operation timeout, which thousands of round trips over a real
        // network would never fit): the chunk's source values read again (locked since the
        // first pass), re-sealed and upserted, read back from the target, deleted from the
        // source. The commit's and the combined read's own statements do the work, each
        // notifying what it changed (delivered at commit). Keys are matched as bytes, as the
        // database compares them: Swift's `String` equality would take two keys PostgreSQL
        // holds apart ("é" precomposed and decomposed) for one.
        var moved = 0
        for chunk in stride(from: 0, to: items.count, by: migrationChunk).map({ items[$0..<min($0 + migrationChunk, items.count)] }) {
            let values = try await readMany(chunk.map(\.key), in: source, on: connection, logger: logger)
            var plaintexts: [[UInt8]] = []
            plaintexts.reserveCapacity(chunk.count)
            defer { for index in plaintexts.indices { CryptoRuntime.cleanse(&plaintexts[index]) } }
            var sets: [(key: String, version: Int64?, sealed: [UInt8])] = []
            sets.reserveCapacity(chunk.count)
            for item in chunk {
                guard let buffer = values[Array(item.key.utf8)] ?? nil else {
                    throw KeystoreError(.migrationFailed, "item '\(item.key)' left the source during the migration; nothing was moved")
                }
                plaintexts.append(try source.open(Array(buffer.readableBytesView), forKey: item.key))
                sets.append((item.key, item.version, try target.seal(plaintexts[plaintexts.count - 1], forKey: item.key)))
            }
            let applied = try await PostgresSchema.applyDistinct(
                sets: sets, removes: [], namespace: target, origin: origin, on: connection, logger: logger).sets
            let stored = try await readMany(chunk.map(\.key), in: target, on: connection, logger: logger)
            let appliedKeys = Set(applied.map { Array($0.utf8) })
            for (item, plaintext) in zip(chunk, plaintexts) {
                guard let buffer = stored[Array(item.key.utf8)] ?? nil else {
                    throw KeystoreError(.migrationFailed, "item '\(item.key)' is missing after the copy; nothing was moved")
                }
                var copy = try target.open(Array(buffer.readableBytesView), forKey: item.key)
                defer { CryptoRuntime.cleanse(&copy) }
                // A newer target item (higher version) legitimately differs from the source.
                if appliedKeys.contains(Array(item.key.utf8)) && copy != plaintext {
                    throw KeystoreError(.migrationFailed, "item '\(item.key)' did not read back identically; nothing was moved")
                }
            }
            moved += try await PostgresSchema.applyDistinct(
                sets: [], removes: chunk.map(\.key), namespace: source, origin: origin, on: connection, logger: logger).removes.count
        }
        return moved
    }
}
