internal import Logging

/// Moves a service's items between access groups: copy, verify, then delete, driven by a
/// ``MigrationJournal`` so that a crash at any point rolls forward on the next open.
/// Always called while holding the service lock.
struct Migrator {
    let layout: KeystoreLayout
    let keySource: KeySource
    let lockTimeout: Duration
    let logger: Logger?
    var checkpoint: MigrationCheckpoint?

    init(layout: KeystoreLayout, keySource: KeySource, lockTimeout: Duration, logger: Logger?) {
        self.layout = layout
        self.keySource = keySource
        self.lockTimeout = lockTimeout
        self.logger = logger
    }

    private func metadata(_ journal: MigrationJournal) -> Logger.Metadata {
        ["broker.service": "\(layout.service)", "broker.fromGroup": "\(journal.from)", "broker.toGroup": "\(journal.to)"]
    }

    /// Finishes a migration a previous process left unfinished, if any.
    func resumeIfNeeded() throws {
        guard let journal = try MigrationJournal.read(layout) else { return }
        logger?.notice("resuming interrupted keystore migration", metadata: metadata(journal).merging(
            ["broker.phase": "\(journal.phase.rawValue)"], uniquingKeysWith: { $1 }))
        _ = try run(journal)
    }

    /// Starts and completes a migration; returns the number of items moved.
    ///
    /// The journal is written only once every source item has been opened: a migration that
    /// would leave items behind (wrong key, tampered or corrupt items) throws before anything
    /// is written.
    @discardableResult
    func migrate(from source: AccessGroup, to target: AccessGroup) throws -> Int {
        let journal = MigrationJournal(from: source, to: target, phase: .copy)
        guard try layout.prepareNamespace(source, create: false) else {
            logger?.debug("keystore migration: nothing to move", metadata: metadata(journal))
            return 0
        }
        return try run(journal)
    }

    /// What the copy phase works on: the source's item keys and its key (`nil` when the
    /// source group has no key at all, so none of its items can be opened by anyone).
    private struct CopyPlan {
        var keys: [String]
        var sourceKey: SecretBytes?
    }

    private func run(_ start: MigrationJournal) throws -> Int {
        let source = Namespace(layout: layout, group: start.from, lockTimeout: lockTimeout)
        let target = Namespace(layout: layout, group: start.to, lockTimeout: lockTimeout)
        guard try layout.prepareNamespace(start.from, create: false) else {
            try finish(start)
            return 0
        }
        let moved = try source.lock.withLock { () throws -> Int in
            var plan: CopyPlan?
            if start.phase == .copy {
                plan = try planCopy(start, from: source)
                // (Re)written only now that every source item is known to open.
                try start.write(layout)
            }
            try layout.prepareNamespace(start.to, create: true)
            return try target.lock.withLock { () throws -> Int in
                var journal = start
                if let plan {
                    journal = try copy(journal, plan, from: source, to: target)
                }
                try delete(journal, from: source)
                try finish(journal)
                return journal.items.count
            }
        }
        logger?.notice("keystore items migrated", metadata: metadata(start).merging(
            ["broker.itemCount": "\(moved)"], uniquingKeysWith: { $1 }))
        return moved
    }

    /// Opens every source item before anything is copied. When some do not open (wrong key,
    /// tampered, corrupt), drops the journal, which in the copy phase only ever describes an
    /// intact source, and throws: nothing is moved or deleted, and no later open resumes it.
    private func planCopy(_ start: MigrationJournal, from source: Namespace) throws -> CopyPlan {
        let keys = try source.itemKeys().sorted()
        guard !keys.isEmpty else { return CopyPlan(keys: [], sourceKey: nil) }
        guard let sourceKey = try keySource.resolveKey(for: start.from, layout: layout, create: false) else {
            logger?.warning("keystore migration: no key for the previous group; its items are left in place",
                            metadata: metadata(start))
            return CopyPlan(keys: [], sourceKey: nil)
        }
        var total = 0
        var unauthenticated = 0
        var corrupt = 0
        for key in keys {
            guard let sealed = try source.readSealed(forKey: key) else { continue }
            total += 1
            do {
                var plaintext = try source.open(sealed, forKey: key, with: sourceKey)
                CryptoRuntime.cleanse(&plaintext)
            } catch let error as KeystoreError where error.code == .authenticationFailed {
                unauthenticated += 1
            } catch let error as KeystoreError where error.code == .corruptFormat {
                corrupt += 1
            }
        }
        guard unauthenticated + corrupt == 0 else {
            let error = Self.unopenedItemsError(unauthenticated: unauthenticated, corrupt: corrupt, of: total, path: source.directory)
            logger?.warning("keystore migration refused: source items do not open; nothing was moved", metadata: metadata(start).merging(
                ["broker.itemCount": "\(unauthenticated + corrupt)", "broker.reason": "\(error.code)"], uniquingKeysWith: { $1 }))
            if try POSIX.removeFile(layout.journalPath) {
                try POSIX.fsyncDirectory(layout.stateDirectory)
            }
            throw error
        }
        return CopyPlan(keys: keys, sourceKey: sourceKey)
    }

    /// ``KeystoreError/Code/authenticationFailed`` (or ``KeystoreError/Code/corruptFormat``
    /// when every failure is a malformed item) saying how many items did not open and why.
    static func unopenedItemsError(unauthenticated: Int, corrupt: Int, of total: Int, path: String) -> KeystoreError {
        let failed = unauthenticated + corrupt
        let causes: String
        switch (unauthenticated, corrupt) {
        case (_, 0): causes = "wrong key or tampered"
        case (0, _): causes = "corrupt or truncated"
        default: causes = "\(unauthenticated) wrong key or tampered, \(corrupt) corrupt or truncated"
        }
        let reason = "\(failed) of \(total) item\(total == 1 ? "" : "s") could not be opened: \(causes); nothing was moved"
        return KeystoreError(unauthenticated > 0 ? .authenticationFailed : .corruptFormat, reason, path: path)
    }

    /// Copy phase: re-seal every source item for the target, make the copies durable,
    /// read them back, then commit the journal to the delete phase.
    private func copy(_ start: MigrationJournal, _ plan: CopyPlan, from source: Namespace, to target: Namespace) throws -> MigrationJournal {
        var journal = start
        journal.phase = .delete
        journal.items = []
        guard let sourceKey = plan.sourceKey, !plan.keys.isEmpty else {
            try journal.write(layout)
            return journal
        }
        guard let targetKey = try keySource.resolveKey(for: start.to, layout: layout, create: true) else {
            throw KeystoreError(.invalidKey, "no key available for the target access group")
        }

        var pending: [(temporary: String, key: String, plainDigest: [UInt8])] = []
        pending.reserveCapacity(plan.keys.count)
        for key in plan.keys {
            guard let sealed = try source.readSealed(forKey: key) else { continue }
            // Every item opened in planCopy under the same source lock; a failure here is an
            // out-of-band change and stops the migration (the journal is still in its copy phase).
            var plaintext = try source.open(sealed, forKey: key, with: sourceKey)
            let plainDigest = Digest.sha256(plaintext)
            let resealed = try target.seal(plaintext, forKey: key, with: targetKey)
            CryptoRuntime.cleanse(&plaintext)
            // Synced below, all at once, before any rename.
            let temporary = try POSIX.writeTemporary(resealed, in: target.directory, mode: target.fileMode, sync: false)
            pending.append((temporary, key, plainDigest))
            journal.items.append(.init(key: key, sourceDigest: Digest.hex(Digest.sha256(sealed))))
        }
        try POSIX.syncFiles(pending.map(\.temporary))
        for (index, item) in pending.enumerated() {
            try POSIX.renameFile(item.temporary, to: target.itemPath(forKey: item.key))
            try checkpoint?("copied", index + 1)
        }
        try POSIX.fsyncDirectory(target.directory)

        for item in pending {
            guard let sealed = try target.readSealed(forKey: item.key) else {
                throw KeystoreError(.migrationFailed, "a migrated item is missing from the target", path: target.itemPath(forKey: item.key))
            }
            var plaintext = try target.open(sealed, forKey: item.key, with: targetKey)
            let matches = Digest.sha256(plaintext) == item.plainDigest
            CryptoRuntime.cleanse(&plaintext)
            guard matches else {
                throw KeystoreError(.migrationFailed, "a migrated item does not read back identically", path: target.itemPath(forKey: item.key))
            }
        }
        try journal.write(layout)
        try checkpoint?("committed", journal.items.count)
        return journal
    }

    /// Delete phase: remove each copied source item whose file is still the one copied.
    private func delete(_ journal: MigrationJournal, from source: Namespace) throws {
        var deleted = 0
        var changed = 0
        for item in journal.items {
            let path = source.itemPath(forKey: item.key)
            guard let bytes = try POSIX.readFile(path) else { continue }
            guard Digest.hex(Digest.sha256(bytes)) == item.sourceDigest else {
                changed += 1
                continue
            }
            try POSIX.removeFile(path)
            deleted += 1
            try checkpoint?("deleted", deleted)
        }
        try POSIX.fsyncDirectory(source.directory)
        if changed > 0 {
            logger?.warning("keystore migration: source items rewritten after the copy are left in place",
                            metadata: metadata(journal).merging(["broker.itemCount": "\(changed)"], uniquingKeysWith: { $1 }))
        }
    }

    /// Records the target as the service's group, then drops the journal.
    private func finish(_ journal: MigrationJournal) throws {
        try layout.writeLastGroup(journal.to, shared: journal.to.isShared)
        try POSIX.removeFile(layout.journalPath)
        try POSIX.fsyncDirectory(layout.stateDirectory)
    }
}
