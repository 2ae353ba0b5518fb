public import Logging

extension SQLiteKeystore {
    /// Moves every item of `service` from access group `from` to `to` under `root`.
    ///
    /// Every source item is opened first; if any cannot be (tampered, wrong key), nothing moves
    /// and the error says how many failed. The items are then copied, re-sealed for their new
    /// group, in one transaction and read back, and deleted from the source in another. The
    /// source's write lock is held from the first read to the deletion: its writers, and a
    /// second migration of it, wait and come after. Items are read one at a time, so memory
    /// does not grow with the source. An interrupted migration is completed by running it again.
    ///
    /// - Returns: How many items left the source (0 when it is empty or does not exist).
    /// - Throws: ``KeystoreError``; on any error the source keeps its items.
    public static func migrate(
        root: String,
        service: String,
        from: AccessGroup,
        to: AccessGroup,
        keySource: KeySource = .keyFile,
        configuration: Configuration = .init(),
        logger: Logger? = nil
    ) async throws(KeystoreError) -> Int {
        try await _migrate(root: root, service: service, from: from, to: to, keySource: keySource, configuration: configuration, logger: logger) { _ in }
    }

    /// ``migrate(root:service:from:to:keySource:configuration:logger:)`` with a checkpoint
    /// called once the source's items are read (`read`) and after the copy (`copied`), for tests.
    package static func _migrate(
        root: String,
        service: String,
        from: AccessGroup,
        to: AccessGroup,
        keySource: KeySource = .keyFile,
        configuration: Configuration = .init(),
        logger: Logger? = nil,
        checkpoint: @escaping @Sendable (String) -> Void
    ) async throws(KeystoreError) -> Int {
        let moved = try await withLayoutOffThePool(root: root, service: service, configuration: configuration) { (layout) throws(KeystoreError) -> Int in
            var migration = StoreMigration(layout: layout, from: from, to: to, keySource: keySource, busyTimeout: configuration.busyTimeout)
            migration.checkpoint = checkpoint
            return try migration.run().moved
        }
        logger?.debug("keystore items migrated", metadata: [
            "broker.service": "\(service)",
            "broker.fromGroup": "\(from)",
            "broker.accessGroup": "\(to)",
            "broker.itemCount": "\(moved)",
        ])
        return moved
    }
}
