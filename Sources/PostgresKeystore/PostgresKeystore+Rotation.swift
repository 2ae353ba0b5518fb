public import Logging
import PostgresNIO
public import SecureStorage

extension PostgresKeystore {
    /// Rotates the key of `service` in access group `group` to `keySource`'s sealing key: the
    /// group's key check is sealed with it, then every item one of its
    /// ``KeySource/alsoOpening(_:)`` keys opens is re-sealed with it (<doc:RunningAFleet>).
    ///
    /// One of the source's keys that exist must open the key check (the old key among the
    /// opening ones, before the rotation; the sealing key, when running it again) before
    /// anything is written (a passphrase's salt included); a group with no check and no item
    /// has nothing to rotate. The check moves first, so a second rotation to another key is
    /// refused, and each batch stops if one moved it meanwhile. Items are re-sealed a few
    /// hundred per transaction, each under the operation timeout, their rows locked in the
    /// order commits lock theirs, with their versions and without notifying anyone (what an
    /// item holds does not change, so no instance's cache needs it again); the fleet's commits
    /// go on between batches. A rotation interrupted anywhere is completed by running it
    /// again. Items no key opens stay as they are and are counted (``KeyRotation/unreadable``).
    /// Instances restarted with the old key as the sealing one are refused from the moment the
    /// check has moved.
    ///
    /// Instances that still seal with the old key keep writing items only it opens: give
    /// every instance the new key as an opening key before the rotation, and run it again once
    /// they all seal with the new key.
    ///
    /// - Throws: ``KeystoreError``; ``KeystoreError/Code/invalidKey`` when no key opens the
    ///   key check. The batches committed before a failure stay re-sealed.
    public static func rekey(
        configuration: Configuration,
        service: String,
        group: AccessGroup,
        keySource: KeySource,
        logger: Logger? = nil
    ) async throws(KeystoreError) -> KeyRotation {
        try await _rekey(configuration: configuration, service: service, group: group, keySource: keySource, logger: logger) { _ in }
    }

    /// ``rekey(configuration:service:group:keySource:logger:)`` with the batch size and a
    /// checkpoint after each batch, for tests.
    package static func _rekey(
        configuration: Configuration,
        service: String,
        group: AccessGroup,
        keySource: KeySource,
        logger: Logger? = nil,
        itemsPerTransaction: Int = 500,
        checkpoint: @escaping @Sendable (Int) throws(KeystoreError) -> Void
    ) async throws(KeystoreError) -> KeyRotation {
        let quiet = try prepareOpening(service: service, group: group, configuration: configuration, logger: logger)
        let rotation = try await withOwnConnection(configuration, logger: quiet) { (own) throws(KeystoreError) -> KeyRotation in
            let started = try await OperationDeadline.run(configuration.operationTimeout, onTimeout: {
                timeout("opening the keystore to rotate its key", configuration)
            }) { () throws(KeystoreError) -> KeyRing? in
                try await startRotation(service: service, group: group, keySource: keySource, configuration: configuration, on: own, logger: quiet)
            }
            guard let keys = started else { return KeyRotation() }
            let namespace = PostgresNamespace(service: service, group: group, keys: keys)
            let batchSize = max(1, itemsPerTransaction)
            var rotation = KeyRotation()
            rotation.keyCheckMoved = true
            var after: String?
            var batches = 0
            while true {
                let resume = after
                let (batch, read, last) = try await OperationDeadline.run(configuration.operationTimeout, onTimeout: {
                    timeout("re-sealing a batch of items (its outcome is unknown: run the rotation again)", configuration)
                }) { () throws(KeystoreError) -> (KeyRotation, Int, String?) in
                    do {
                        return try await own.run(logger: quiet) { connection in
                            try await transaction(on: connection, logger: quiet) {
                                try await PostgresKeyCheck.requireStillSealing(service: service, group: group, keys: keys, on: connection, logger: quiet)
                                return try await reseal(namespace, after: resume, limit: batchSize, on: connection, logger: quiet)
                            }
                        }
                    } catch let error as CommitOutcomeUnknown {
                        throw KeystoreError.postgres(
                            error.underlying, operation: "re-sealing items (the connection was lost while committing: the outcome is unknown)",
                            configuration: configuration)
                    } catch {
                        throw KeystoreError.postgres(error, operation: "re-sealing items", configuration: configuration)
                    }
                }
                rotation.add(batch)
                guard read == batchSize, let last else { break }
                after = last
                batches += 1
                quiet.debug("keystore key rotation in progress", metadata: [
                    "broker.accessGroup": "\(group)", "broker.resealed": "\(rotation.resealed)", "broker.unreadable": "\(rotation.unreadable)",
                ])
                try checkpoint(batches)
            }
            return rotation
        }
        logger?.debug("keystore key rotated", metadata: [
            "broker.service": "\(service)",
            "broker.accessGroup": "\(group)",
            "broker.resealed": "\(rotation.resealed)",
            "broker.unreadable": "\(rotation.unreadable)",
            "broker.endpoint": "\(configuration.endpoint)",
        ])
        return rotation
    }

    /// The start of a rotation, on its own connection: the schema, the proof with the keys
    /// that exist (none made), then the sealing key (a passphrase's salt made only now) and
    /// the check moved to it. The namespace's keys, or `nil` when it holds nothing sealed.
    private static func startRotation(
        service: String, group: AccessGroup, keySource: KeySource, configuration: Configuration, on own: OwnConnection, logger quiet: Logger
    ) async throws(KeystoreError) -> KeyRing? {
        do {
            _ = try await own.run(logger: quiet) { connection in try await PostgresSchema.install(on: connection, logger: quiet) }
        } catch {
            throw KeystoreError.postgres(error, operation: "creating the schema", configuration: configuration)
        }
        // Authority first, with the keys that exist; the sealing key's salt is made only
        // once the check or an item has opened.
        let existing = try await PostgresKeyResolver.existingKeys(
            for: group, source: keySource, configuration: configuration, connection: own, logger: quiet)
        let proven = (existing.sealing.map { [$0] } ?? []) + existing.opening
        guard let first = proven.first else {
            throw KeystoreError(
                .invalidKey, "none of the keys given exists for \(KeyCheck.describe(service: service, group: group)): nothing can open its items")
        }
        let proof = KeyRing(sealing: first, opening: Array(proven.dropFirst()))
        do {
            let mayStart = try await own.run(logger: quiet) { connection in
                try await PostgresKeyCheck.mayStartRotation(service: service, group: group, keys: proof, on: connection, logger: quiet)
            }
            guard mayStart else { return nil }
        } catch {
            throw KeystoreError.postgres(error, operation: "checking the key", configuration: configuration)
        }
        // Derived once: a passphrase's scrypt is the slow part of an open.
        let sealing: SecretBytes
        if let found = existing.sealing {
            sealing = found
        } else {
            sealing = try await PostgresKeyResolver.sealingKey(
                for: group, source: keySource, configuration: configuration, connection: own, logger: quiet)
        }
        let keys = KeyRing(sealing: sealing, opening: existing.opening)
        // The check moves first: a second rotation to another key is then refused, and
        // each batch stops if one moved it meanwhile.
        do {
            let moved = try await own.run(logger: quiet) { connection in
                try await transaction(on: connection, logger: quiet) {
                    try await PostgresKeyCheck.moveForRotation(service: service, group: group, keys: keys, on: connection, logger: quiet)
                }
            }
            return moved ? keys : nil
        } catch {
            throw KeystoreError.postgres(error, operation: "moving the key check", configuration: configuration)
        }
    }

    /// One batch of a rotation, inside the caller's transaction: the next `limit` rows after
    /// `after` in the index's order, locked in byte order (`COLLATE "C"`, as commits and
    /// migrations take theirs, so none of them can deadlock with it), each re-sealed when an
    /// opening key opens it, in one `UPDATE`. Returns what it counted, how many rows it read
    /// and the last key in the index's order.
    private static func reseal(
        _ namespace: PostgresNamespace, after: String?, limit: Int, on connection: PostgresConnection, logger: Logger
    ) async throws -> (KeyRotation, Int, String?) {
        // The database's collation pages through the primary key's index; it is
        // deterministic, so distinct keys never compare equal and none is skipped.
        let keys = try await connection.query("""
            SELECT key FROM identity_broker_items
            WHERE service = \(namespace.service) AND access_group = \(namespace.groupColumn) AND (\(after)::text IS NULL OR key > \(after))
              AND pg_catalog.octet_length(key) <= \(unescaped: String(PostgresNamespace.maximumKeyBytes))
            ORDER BY key LIMIT \(limit)
            """, logger: logger).collect().map { try $0.decode(String.self) }
        guard !keys.isEmpty else { return (KeyRotation(), 0, nil) }
        let rows = try await connection.query("""
            SELECT key, \(unescaped: PostgresSchema.cappedValue) FROM identity_broker_items
            WHERE service = \(namespace.service) AND access_group = \(namespace.groupColumn) AND key = ANY(\(keys))
            ORDER BY key COLLATE "C" FOR UPDATE
            """, logger: logger)
        var batch = KeyRotation()
        var resealedKeys: [String] = []
        var resealedValues: [ByteBuffer] = []
        // Streamed: one row's value in memory at a time (a role that may write the table can
        // make each up to the 1 MiB cap), besides the re-sealed ones, which only the key opens.
        for try await row in rows {
            let (key, buffer) = try row.decode((String, ByteBuffer).self)
            guard var opened = try? namespace.keys.open(Array(buffer.readableBytesView), binding: namespace.binding, forKey: key) else {
                batch.noteUnreadable(key)
                continue
            }
            defer { CryptoRuntime.cleanse(&opened.value) }
            guard opened.opener == .opening else {
                batch.alreadySealed += 1
                continue
            }
            resealedKeys.append(key)
            resealedValues.append(ByteBuffer(bytes: try namespace.seal(opened.value, forKey: key)))
        }
        if !resealedKeys.isEmpty {
            try await connection.query("""
                UPDATE identity_broker_items AS items SET value = resealed.value
                FROM ROWS FROM (pg_catalog.unnest(\(resealedKeys)::text[]), pg_catalog.unnest(\(resealedValues)::bytea[])) AS resealed(key, value)
                WHERE items.service = \(namespace.service) AND items.access_group = \(namespace.groupColumn) AND items.key = resealed.key
                """, logger: logger)
            batch.resealed = resealedKeys.count
        }
        // Rows removed between the two reads are simply gone: nothing to re-seal.
        return (batch, keys.count, keys.last)
    }
}
