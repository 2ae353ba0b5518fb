public import Logging

extension SQLiteKeystore {
    /// Rotates the key of `service` in access group `group` under `root` to `keySource`'s
    /// sealing key: the namespace's key check is sealed with it, then every item one of its
    /// ``KeySource/alsoOpening(_:)`` keys opens is re-sealed with it (<doc:RotatingKeys>).
    ///
    /// One of the source's keys that exist must open the namespace's key check (the old key
    /// among the opening ones, before the rotation; the sealing key, when running it again)
    /// before anything is made or written. The check moves first, so a second rotation to
    /// another key is refused, and each batch stops if one moved it meanwhile. Items are
    /// re-sealed a few hundred per transaction, with their versions, so the namespace's
    /// writers keep committing meanwhile; a rotation interrupted anywhere is completed by
    /// running it again. Items no key opens stay as they are and are counted
    /// (``KeyRotation/unreadable``). With ``KeySource/keyFile`` as the sealing source and the
    /// group's key file missing (moved aside, and given as an opening key), a new random key
    /// file is made. A namespace with no database, or with no check and no item, has nothing
    /// to rotate. A sealing key derived from a salt file without a header in a shared group
    /// (which a member could have planted) is refused.
    ///
    /// Processes that still seal with the old key keep writing items only it opens: give
    /// every process the new key as an opening key before the rotation, and run it again
    /// once they all seal with the new key.
    ///
    /// - Throws: ``KeystoreError``, ``KeystoreError/Code/invalidKey`` when no key opens the
    ///   key check, or another rotation moved it meanwhile; the batches committed before a
    ///   failure stay re-sealed.
    public static func rekey(
        root: String,
        service: String,
        group: AccessGroup,
        keySource: KeySource,
        configuration: Configuration = .init(),
        logger: Logger? = nil
    ) async throws(KeystoreError) -> KeyRotation {
        try await _rekey(root: root, service: service, group: group, keySource: keySource, configuration: configuration, logger: logger) { _ in }
    }

    /// ``rekey(root:service:group:keySource:configuration:logger:)`` with the batch size
    /// and a checkpoint after each batch, for tests.
    package static func _rekey(
        root: String,
        service: String,
        group: AccessGroup,
        keySource: KeySource,
        configuration: Configuration = .init(),
        logger: Logger? = nil,
        itemsPerTransaction: Int = 256,
        checkpoint: @escaping @Sendable (Int64) throws(KeystoreError) -> Void
    ) async throws(KeystoreError) -> KeyRotation {
        let rotation = try await withLayoutOffThePool(root: root, service: service, configuration: configuration) { (layout) throws(KeystoreError) -> KeyRotation in
            var rotation = StoreRotation(layout: layout, group: group, keySource: keySource, busyTimeout: configuration.busyTimeout)
            rotation.itemsPerTransaction = itemsPerTransaction
            rotation.checkpoint = checkpoint
            rotation.progress = { counted in
                logger?.debug("keystore key rotation in progress", metadata: [
                    "broker.accessGroup": "\(group)", "broker.resealed": "\(counted.resealed)", "broker.unreadable": "\(counted.unreadable)",
                ])
            }
            return try rotation.run()
        }
        logger?.debug("keystore key rotated", metadata: [
            "broker.service": "\(service)",
            "broker.accessGroup": "\(group)",
            "broker.resealed": "\(rotation.resealed)",
            "broker.unreadable": "\(rotation.unreadable)",
        ])
        return rotation
    }
}
