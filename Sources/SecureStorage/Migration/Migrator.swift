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
    @discardableResult
    func migrate(from source: AccessGroup, to target: AccessGroup) throws -> Int {
        let journal = MigrationJournal(from: source, to: target, phase: .copy)
        guard try layout.prepareNamespace(source, create: false) else {
            logger?.debug("keystore migration: nothing to move", metadata: metadata(journal))
            return 0
        }
        try journal.write(layout)
        return try run(journal)
    }

    private func run(_ start: MigrationJournal) throws -> Int {
        let source = Namespace(layout: layout, group: start.from, lockTimeout: lockTimeout)
        let target = Namespace(layout: layout, group: start.to, lockTimeout: lockTimeout)
        guard try layout.prepareNamespace(start.from, create: false) else {
            try finish(start)
            return 0
        }
        try layout.prepareNamespace(start.to, create: true)
        let moved = try source.lock.withLock {
            try target.lock.withLock { () throws -> Int in
                var journal = start
                if journal.phase == .copy {
                    journal = try copy(journal, from: source, to: target)
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

    /// Copy phase: re-seal every readable source item for the target, make the copies durable,
    /// read them back, then commit the journal to the delete phase.
    private func copy(_ start: MigrationJournal, from source: Namespace, to target: Namespace) throws -> MigrationJournal {
        var journal = start
        journal.phase = .delete
        journal.items = []
        let keys = try source.itemKeys().sorted()
        guard !keys.isEmpty else {
            try journal.write(layout)
            return journal
        }
        guard let sourceKey = try keySource.resolveKey(for: start.from, layout: layout, create: false) else {
            logger?.warning("keystore migration: no key for the previous group; its items are left in place",
                            metadata: metadata(start))
            try journal.write(layout)
            return journal
        }
        guard let targetKey = try keySource.resolveKey(for: start.to, layout: layout, create: true) else {
            throw KeystoreError(.invalidKey, "no key available for the target access group")
        }

        var pending: [(temporary: String, key: String, plainDigest: [UInt8])] = []
        pending.reserveCapacity(keys.count)
        var skipped = 0
        for key in keys {
            guard let sealed = try source.readSealed(forKey: key) else { continue }
            var plaintext: [UInt8]
            do {
                plaintext = try source.open(sealed, forKey: key, with: sourceKey)
            } catch let error as KeystoreError where error.code == .authenticationFailed || error.code == .corruptFormat {
                skipped += 1
                continue
            }
            let plainDigest = Digest.sha256(plaintext)
            let resealed = try target.seal(plaintext, forKey: key, with: targetKey)
            CryptoRuntime.cleanse(&plaintext)
            // Synced below, all at once, before any rename.
            let temporary = try POSIX.writeTemporary(resealed, in: target.directory, mode: target.fileMode, sync: false)
            pending.append((temporary, key, plainDigest))
            journal.items.append(.init(key: key, sourceDigest: Digest.hex(Digest.sha256(sealed))))
        }
        if skipped > 0 {
            logger?.warning("keystore migration: items that failed to open are left in place",
                            metadata: metadata(start).merging(["broker.itemCount": "\(skipped)"], uniquingKeysWith: { $1 }))
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
