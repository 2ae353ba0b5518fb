#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Moves a service's items from one access group's database to another's.
///
/// Both keys must open their namespace's key check (``StoreNamespace/verifyKey(on:service:)``).
/// Every source item is opened with the source key first; if any cannot be, nothing moves,
/// unless ``leavingUnreadable`` is set (a move on open): such an item, and one whose newer
/// target item does not open, then stays in the source, and the rest moves.
/// Then one transaction on the target upserts every item re-sealed for its new name (versions
/// kept, a newer target item wins), with change rows, and reads each back; the source's
/// transaction, which read the items and holds its write lock throughout, then deletes each
/// item only if its ciphertext is unchanged. A crash between the two commits leaves both
/// copies, and running the migration again completes it: no progress marker is needed.
struct StoreMigration {
    let layout: StoreLayout
    let from: AccessGroup
    let to: AccessGroup
    let keySource: KeySource
    let busyTimeout: Duration
    /// Whether items that do not open stay behind rather than stopping the migration.
    var leavingUnreadable = false
    /// Called at `read` (the source's items read, its lock held) and `copied` (after the
    /// target's commit, before the source's), for tests.
    var checkpoint: (String) -> Void = { _ in }

    private struct SourceItem {
        let key: String
        let version: Int64?
        let sealed: [UInt8]
        var plaintext: [UInt8]
    }

    /// What a run did: how many items left the source, how many stayed because they were
    /// rewritten there while it ran (the next run moves them), and how many stayed because
    /// they (or newer target items) do not open.
    struct Outcome {
        var moved = 0
        var rewrittenMeanwhile = 0
        var unreadableLeft = 0
    }

    /// A failure, and the side it came from. A move on open tolerates a shared source's
    /// failures (its other members can hold its lock or spoil its key check) but not the
    /// target's (the user's own private database, or the group the user moves to): those fail
    /// the open, which records nothing, so the next open tries again.
    struct Failure: Error {
        let error: KeystoreError
        let onTarget: Bool
        /// The target transaction committed: the items are in the target (and stay in the
        /// source too, when deleting them there failed).
        let copied: Bool
    }

    func run() throws(KeystoreError) -> Outcome {
        do {
            return try runNotingSide()
        } catch {
            throw error.error
        }
    }

    /// ``run()``, saying which side a failure came from.
    ///
    /// The source's write lock is held from the read of its items to their deletion (one
    /// immediate transaction on the source, around the target's): no other migration of the
    /// same source can copy an item this one moved and the user changed meanwhile, and no
    /// writer can change an item between its read and its deletion.
    func runNotingSide() throws(Failure) -> Outcome {
        guard from != to else { return Outcome() }
        var targetFailure: KeystoreError?
        var copied = false
        do throws(KeystoreError) {
            guard let source = try StoreNamespace.open(layout: layout, group: from, keySource: keySource, create: false) else {
                // No database: nothing to move. A database without its key (the key file or the
                // passphrase's salt missing, or another key source used than the one that made
                // it) holds items no key here opens: not "nothing to move".
                if try layout.status(layout.databasePath(from)) != nil {
                    throw KeystoreError(
                        .invalidKey,
                        "the source access group has a database but no key for it here (its key file or passphrase salt is missing, or it uses another key source); nothing was moved",
                        path: layout.databasePath(from))
                }
                return Outcome()
            }
            // An existing target is opened and its key checked first: a wrong key then fails on
            // the target's side, which a move on open never tolerates, even when the source's
            // check (a shared group's, whose failures it does tolerate) would fail too. A new
            // target is made only once the source's items all opened (so a refused migration
            // leaves no target behind), under the source's lock, which nobody else can be
            // waiting for.
            var target: (namespace: StoreNamespace, connection: SQLiteConnection)?
            defer { target?.connection.close() }
            do throws(KeystoreError) {
                target = try openTarget(create: false)
            } catch {
                targetFailure = error
                throw error
            }
            let sourceConnection = try source.connect(service: layout.service, busyTimeout: busyTimeout)
            defer { sourceConnection.close() }
            // A wrong key is refused as such, before any item is looked at.
            try source.verifyKey(on: sourceConnection, service: layout.service)
            // The target's lock is never waited for while the source's is held (a migration
            // the other way holds them the other way round): when it is busy, the source's is
            // let go and both are taken again after a short random pause, until the busy
            // timeout has passed.
            let deadline = ContinuousClock.now.advanced(by: busyTimeout)
            var pause: Duration = .milliseconds(2)
            while true {
                do throws(KeystoreError) {
                    return try moveOnce(source, on: sourceConnection, target: &target, targetFailure: &targetFailure, copied: &copied)
                } catch where targetFailure?.code == .storeUnavailable && !copied && ContinuousClock.now < deadline {
                    targetFailure = nil
                    usleep(UInt32(clamping: Int64.random(in: pause.wholeMicroseconds / 2...pause.wholeMicroseconds)))
                    pause = min(pause * 2, .milliseconds(100))
                }
            }
        } catch {
            throw Failure(error: error, onTarget: targetFailure != nil, copied: copied)
        }
    }

    /// One attempt of the move, in one immediate transaction on the source.
    private func moveOnce(
        _ source: StoreNamespace, on sourceConnection: SQLiteConnection,
        target: inout (namespace: StoreNamespace, connection: SQLiteConnection)?,
        targetFailure: inout KeystoreError?, copied: inout Bool
    ) throws(KeystoreError) -> Outcome {
        try sourceConnection.immediateTransaction { () throws(KeystoreError) -> Outcome in
            var (items, unreadable) = try read(source, on: sourceConnection)
            defer { for index in items.indices { CryptoRuntime.cleanse(&items[index].plaintext) } }
            guard !items.isEmpty else { return Outcome(unreadableLeft: unreadable) }
            checkpoint("read")
            let (staying, origin): (Set<String>, Int64)
            do throws(KeystoreError) {
                if target == nil { target = try openTarget(create: true) }
                guard let target else { throw KeystoreError(.invalidKey, "no key available for the target access group") }
                (staying, origin) = try copy(items, into: target.namespace, on: target.connection)
            } catch {
                targetFailure = error
                throw error
            }
            copied = true
            checkpoint("copied")
            var moved = 0
            for item in items where !staying.contains(item.key) {
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
            return Outcome(moved: moved, rewrittenMeanwhile: items.count - staying.count - moved, unreadableLeft: unreadable + staying.count)
        }
    }

    /// Copies `items` into the target in one transaction, re-sealed for their new name and
    /// read back; returns the keys that stay in the source (a newer target item that does
    /// not open, when ``leavingUnreadable``) and the origin of the change rows written.
    private func copy(
        _ items: [SourceItem], into target: StoreNamespace, on targetConnection: SQLiteConnection
    ) throws(KeystoreError) -> (staying: Set<String>, origin: Int64) {
        let origin = try KeystoreError.rethrowing { try CryptoRuntime.randomBytes(8).reduce(Int64(0)) { $0 << 8 | Int64($1) } }

        var staying: Set<String> = []
        try targetConnection.immediateTransactionWithoutWaiting { () throws(KeystoreError) in
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
                var copy: [UInt8]
                do throws(KeystoreError) {
                    guard let stored = try StoreSchema.sealedValue(forKey: item.key, on: targetConnection) else {
                        throw KeystoreError(.migrationFailed, "item '\(item.key)' is missing after the copy; nothing was moved", path: target.databasePath)
                    }
                    copy = try target.open(stored, forKey: item.key)
                } catch where !applied && leavingUnreadable && (error.code == .authenticationFailed || error.code == .corruptFormat) {
                    // A newer target item that cannot be read or opened: the source item stays.
                    staying.insert(item.key)
                    continue
                }
                defer { CryptoRuntime.cleanse(&copy) }
                // A newer target item (higher version) legitimately differs from the source.
                if applied && copy != item.plaintext {
                    throw KeystoreError(.migrationFailed, "item '\(item.key)' did not read back identically; nothing was moved", path: target.databasePath)
                }
            }
        }
        return (staying, origin)
    }

    /// The target namespace and a connection to it, its key checked (so items never move
    /// into a namespace under a key its other items do not have); `nil` when it does not
    /// exist and `create` is off.
    private func openTarget(create: Bool) throws(KeystoreError) -> (namespace: StoreNamespace, connection: SQLiteConnection)? {
        guard let target = try StoreNamespace.open(layout: layout, group: to, keySource: keySource, create: create) else {
            if create { throw KeystoreError(.invalidKey, "no key available for the target access group") }
            return nil
        }
        let connection = try target.connect(service: layout.service, busyTimeout: busyTimeout)
        do throws(KeystoreError) {
            try target.verifyKey(on: connection, service: layout.service)
        } catch {
            connection.close()
            throw error
        }
        return (target, connection)
    }

    /// Reads and opens every source item; throws, naming how many failed, before anything
    /// moves, unless ``leavingUnreadable`` (then returns how many did not open).
    private func read(_ source: StoreNamespace, on connection: SQLiteConnection) throws(KeystoreError) -> ([SourceItem], Int) {
        let (rows, unreadableRows) = try StoreSchema.everyItem(StoreSchema.selectItems, byId: StoreSchema.selectItemById, on: connection) {
            statement -> (String, Int64?, [UInt8]?) in
            (statement.text(0), statement.isNull(1) ? nil : statement.int64(1), statement.isNull(2) ? nil : statement.blob(2))
        }
        var items: [SourceItem] = []
        var failures = [KeystoreError](
            repeating: KeystoreError(
                .corruptFormat, "an item's row cannot be read (a key over \(SQLiteConnection.maximumLength) bytes, or damaged)",
                path: source.databasePath),
            count: unreadableRows)
        for (key, version, sealed) in rows {
            guard let sealed else {
                failures.append(KeystoreError(
                    .corruptFormat, "an item is not a value of at most \(SQLiteConnection.maximumLength) bytes", path: source.databasePath))
                continue
            }
            do {
                items.append(SourceItem(key: key, version: version, sealed: sealed, plaintext: try source.open(sealed, forKey: key)))
            } catch {
                failures.append(error)
            }
        }
        if let first = failures.first, !leavingUnreadable {
            for index in items.indices { CryptoRuntime.cleanse(&items[index].plaintext) }
            throw KeystoreError(
                first.code,
                "\(failures.count) of \(rows.count + unreadableRows) items cannot be opened with the source key (first: \(first.reason)); nothing was moved",
                path: source.databasePath
            )
        }
        return (items, failures.count)
    }
}
