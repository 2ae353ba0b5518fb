public import Logging

extension FileKeystore {
    /// Moves every item of `service` from one access group to another, for tools such as
    /// `federate migrate --from GROUP|none --to GROUP|none`.
    ///
    /// Items are copied (re-sealed for the new group), made durable, read back and verified,
    /// and only then deleted from the source, under a journal kept in the keystore root: if the
    /// process dies at any point, the next open or migration of the service finishes the job
    /// without losing or duplicating an item. An item already present in the target is
    /// replaced by the source's. Afterwards the service's remembered group is `to`.
    ///
    /// Every source item is opened before anything is copied. When some do not open (wrong
    /// key, tampered, corrupt), the migration throws and nothing is moved or deleted: the
    /// target is left as it was and the remembered group does not change. Use the right key,
    /// or remove the damaged items from the source group, and migrate again.
    ///
    /// - Returns: The number of items moved.
    /// - Throws: ``KeystoreError``: ``KeystoreError/Code/authenticationFailed`` (or
    ///   ``KeystoreError/Code/corruptFormat`` when every failing item is malformed) when
    ///   source items do not open, its reason saying how many, for example
    ///   "3 of 5 items could not be opened: wrong key or tampered; nothing was moved".
    @discardableResult
    public static func migrate(
        root: String,
        service: String,
        from source: AccessGroup,
        to target: AccessGroup,
        keySource: KeySource = .keyFile,
        lockTimeout: Duration = FileKeystore.defaultLockTimeout,
        logger: Logger? = nil
    ) throws -> Int {
        try migrate(root: root, service: service, from: source, to: target, keySource: keySource,
                    lockTimeout: lockTimeout, logger: logger, checkpoint: nil)
    }

    static func migrate(
        root: String,
        service: String,
        from source: AccessGroup,
        to target: AccessGroup,
        keySource: KeySource,
        lockTimeout: Duration,
        logger: Logger?,
        checkpoint: MigrationCheckpoint?
    ) throws -> Int {
        try CryptoRuntime.ensureInitialised()
        for group in [source, target] {
            if let name = group.name {
                try KeystoreLayout.validate(name: name, what: "access group name", limit: KeystoreLayout.maximumNameBytes)
            }
        }
        let layout = try KeystoreLayout(root: root, service: service)
        let shared = target.isShared
        try layout.prepareRoot(shared: shared)
        var migrator = Migrator(layout: layout, keySource: keySource, lockTimeout: lockTimeout, logger: logger)
        migrator.checkpoint = checkpoint
        return try NamespaceLock(path: layout.serviceLockPath, mode: KeystoreLayout.fileMode(shared: shared), timeout: lockTimeout).withLock {
            try migrator.resumeIfNeeded()
            let moved = source.sameLocation(as: target) ? 0 : try migrator.migrate(from: source, to: target)
            try layout.writeLastGroup(target, shared: shared)
            return moved
        }
    }
}
