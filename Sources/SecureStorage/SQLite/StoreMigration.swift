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
/// transaction, which read the items and holds its write lock throughout, then deletes them.
/// A crash between the two commits leaves both copies, and running the migration again
/// completes it: no progress marker is needed. Items are read one at a time (memory holds one
/// item, and the IDs and keys, whatever the source holds), and a move on open out of a shared
/// group moves nothing when its items (readable or not) add up to more than
/// ``moveOnOpenByteLimit``.
struct StoreMigration {
    let layout: StoreLayout
    let from: AccessGroup
    let to: AccessGroup
    let keySource: KeySource
    let busyTimeout: Duration
    /// Whether items that do not open stay behind rather than stopping the migration.
    var leavingUnreadable = false
    /// Called at `read` (the source's items read, its lock held), `rereading` (before each
    /// source item is read again for the copy, inside the target's transaction) and `copied`
    /// (after the target's commit, before the source's), for tests: what it throws fails the
    /// migration there, on that step's side.
    var checkpoint: (String) throws(KeystoreError) -> Void = { _ in }

    /// What a run did: how many items left the source, and how many stayed because they (or
    /// newer target items) do not open.
    struct Outcome {
        var moved = 0
        var unreadableLeft = 0
    }

    /// The most a move on open reads out of a shared group: the sealed values plus
    /// ``rowOverhead`` per item, those that do not open included (the survey stops there). A member of the group can plant items there (with the group's
    /// key, which every member holds); without a cap, enough of them would fill the user's
    /// disk at the move, and the move's failure on the user's side would then fail every open.
    /// Over the cap, nothing moves on open (a failure on the shared group's side, which the
    /// open tolerates): the user runs `migrate`, which has no cap. 64 MiB is ~40,000 sessions.
    static let moveOnOpenByteLimit = 64 << 20
    /// What each item counts for besides its sealed value (its key, row and index entry).
    static let rowOverhead = 256

    /// The source's items that will be copied, found by a first pass that opens each one.
    private struct Survey {
        /// The IDs of the rows to copy, in the table's order.
        var movable: [Int64] = []
        var unreadable = 0
        /// The sealed values' bytes, plus ``rowOverhead`` per item (those that do not open too).
        var bytes = 0
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
            guard let source = try StoreNamespace.open(layout: layout, group: from, keySource: keySource, create: .nothing) else {
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
    ///
    /// Items are read one row at a time, twice (once to check that each opens, once to copy
    /// it), so that memory holds one item at a time whatever the source holds.
    private func moveOnce(
        _ source: StoreNamespace, on sourceConnection: SQLiteConnection,
        target: inout (namespace: StoreNamespace, connection: SQLiteConnection)?,
        targetFailure: inout KeystoreError?, copied: inout Bool
    ) throws(KeystoreError) -> Outcome {
        try sourceConnection.immediateTransaction { () throws(KeystoreError) -> Outcome in
            let survey = try self.survey(source, on: sourceConnection)
            guard !survey.movable.isEmpty else { return Outcome(unreadableLeft: survey.unreadable) }
            try checkpoint("read")
            let (moving, staying, origin): ([(id: Int64, key: String)], Int, Int64)
            // The copy reads the source again: a failure there is the source's, not the target's.
            var sourceFailed = false
            do throws(KeystoreError) {
                if target == nil { target = try openTarget(create: true) }
                guard let target else { throw KeystoreError(.invalidKey, "no key available for the target access group") }
                (moving, staying, origin) = try copy(
                    survey.movable, from: source, on: sourceConnection, into: target.namespace, on: target.connection, sourceFailed: &sourceFailed)
            } catch {
                if !sourceFailed { targetFailure = error }
                throw error
            }
            copied = true
            try checkpoint("copied")
            // Nobody else has written the source since the survey: its write lock is held.
            for item in moving {
                try sourceConnection.withStatement(StoreSchema.deleteById) { statement throws(KeystoreError) in
                    try statement.bind(1, int64: item.id)
                    try statement.bind(2, text: item.key)
                    _ = try statement.step()
                }
                try StoreSchema.appendChange(item.key, origin: origin, on: sourceConnection)
            }
            return Outcome(moved: moving.count, unreadableLeft: survey.unreadable + staying)
        }
    }

    /// Copies the source rows `ids` into the target in one transaction, re-sealed for their
    /// new name and read back; returns the rows to delete from the source, how many stay there
    /// (a newer target item that does not open, when ``leavingUnreadable``), and the origin of
    /// the change rows written.
    private func copy(
        _ ids: [Int64], from source: StoreNamespace, on sourceConnection: SQLiteConnection,
        into target: StoreNamespace, on targetConnection: SQLiteConnection, sourceFailed: inout Bool
    ) throws(KeystoreError) -> (moving: [(id: Int64, key: String)], staying: Int, origin: Int64) {
        let origin = try KeystoreError.rethrowing { try CryptoRuntime.randomBytes(8).reduce(Int64(0)) { $0 << 8 | Int64($1) } }

        var moving: [(id: Int64, key: String)] = []
        var staying = 0
        try targetConnection.immediateTransactionWithoutWaiting { () throws(KeystoreError) in
            for id in ids {
                let row: (key: String, version: Int64?, sealed: [UInt8]?)
                var plaintext: [UInt8]
                do throws(KeystoreError) {
                    try checkpoint("rereading")
                    guard let found = try StoreSchema.item(byId: id, on: sourceConnection), let sealed = found.sealed else {
                        throw KeystoreError(.migrationFailed, "an item changed in the source during the migration; nothing was moved", path: source.databasePath)
                    }
                    row = found
                    plaintext = try source.open(sealed, forKey: row.key)
                } catch {
                    sourceFailed = true
                    throw error
                }
                defer { CryptoRuntime.cleanse(&plaintext) }
                let resealed = try target.seal(plaintext, forKey: row.key)
                try targetConnection.withStatement(StoreSchema.upsert) { statement throws(KeystoreError) in
                    try statement.bind(1, text: row.key)
                    try statement.bind(2, int64: row.version)
                    try statement.bind(3, blob: resealed)
                    _ = try statement.step()
                }
                let applied = targetConnection.changes > 0
                if applied { try StoreSchema.appendChange(row.key, origin: origin, on: targetConnection) }
                var copy: [UInt8]
                do throws(KeystoreError) {
                    guard let stored = try StoreSchema.sealedValue(forKey: row.key, on: targetConnection) else {
                        throw KeystoreError(.migrationFailed, "item '\(row.key)' is missing after the copy; nothing was moved", path: target.databasePath)
                    }
                    copy = try target.open(stored, forKey: row.key)
                } catch where !applied && leavingUnreadable && (error.code == .authenticationFailed || error.code == .corruptFormat) {
                    // A newer target item that cannot be read or opened: the source item stays.
                    staying += 1
                    continue
                }
                defer { CryptoRuntime.cleanse(&copy) }
                // A newer target item (higher version) legitimately differs from the source.
                if applied && copy != plaintext {
                    throw KeystoreError(.migrationFailed, "item '\(row.key)' did not read back identically; nothing was moved", path: target.databasePath)
                }
                moving.append((id, row.key))
            }
        }
        return (moving, staying, origin)
    }

    /// The target namespace and a connection to it, its key checked (so items never move
    /// into a namespace under a key its other items do not have); `nil` when it does not
    /// exist and `create` is off.
    private func openTarget(create: Bool) throws(KeystoreError) -> (namespace: StoreNamespace, connection: SQLiteConnection)? {
        guard let target = try StoreNamespace.open(layout: layout, group: to, keySource: keySource, create: create ? .whatIsMissing(busyTimeout: busyTimeout) : .nothing) else {
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

    /// Opens every source item, one at a time; throws, naming how many failed, before anything
    /// moves, unless ``leavingUnreadable`` (then counts them, and leaves them out).
    ///
    /// A move on open out of a shared group stops at ``moveOnOpenByteLimit``, before opening
    /// the rest: a member's planted gigabytes are neither read in full nor decrypted while the
    /// group's write lock is held.
    private func survey(_ source: StoreNamespace, on connection: SQLiteConnection) throws(KeystoreError) -> Survey {
        let byteLimit = leavingUnreadable && from.isShared ? Self.moveOnOpenByteLimit : nil
        let ids = try StoreSchema.itemIds(on: connection)
        var survey = Survey()
        var firstFailure: KeystoreError?
        var failures = 0
        for id in ids {
            do throws(KeystoreError) {
                guard let row = try StoreSchema.item(byId: id, on: connection) else { continue }
                guard let sealed = row.sealed else {
                    throw KeystoreError(
                        .corruptFormat, "an item is not a value of at most \(SQLiteConnection.maximumLength) bytes", path: source.databasePath)
                }
                survey.bytes += sealed.count + Self.rowOverhead
                if let byteLimit, survey.bytes > byteLimit {
                    throw KeystoreError(
                        .migrationFailed,
                        "the previous access group holds more than the \(byteLimit >> 20) MiB a move on open copies out of a shared group; nothing was moved",
                        path: source.databasePath)
                }
                var plaintext = try source.open(sealed, forKey: row.key)
                CryptoRuntime.cleanse(&plaintext)
                survey.movable.append(id)
            } catch where error.code == .corruptFormat || error.code == .authenticationFailed {
                // A row SQLite cannot read (a key over the length limit, a damaged page) or an
                // item that does not open.
                failures += 1
                if firstFailure == nil { firstFailure = error }
            }
        }
        if let first = firstFailure, !leavingUnreadable {
            throw KeystoreError(
                first.code,
                "\(failures) of \(survey.movable.count + failures) items cannot be opened with the source key (first: \(first.reason)); nothing was moved",
                path: source.databasePath
            )
        }
        survey.unreadable = failures
        return survey
    }
}
