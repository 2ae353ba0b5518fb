import Dispatch
import Synchronization

/// A key one commit changed, and the writer tag of the batches that changed it when they all
/// carried the same one (`nil`: untagged, or several writers).
struct CommittedChange: Sendable {
    let key: String
    var writer: UInt64?
}

/// The single writer of one database: batches queued while a commit runs are committed
/// together in the next `BEGIN IMMEDIATE … COMMIT`, so concurrent writers share one fsync.
///
/// Whoever holds the writer (`State.draining`) uses the connection, one at a time: normally
/// `queue`, a serial queue off Swift's cooperative pool. A batch that finds the writer idle
/// is committed on its caller's thread instead (``commitIfIdle(_:writer:)``): at concurrency 1
/// that saves two thread wake-ups per commit (the queue's worker, then the caller's
/// continuation), about a tenth of a durable federation's CPU. What it costs is bounded: it
/// never waits for a lock (another process's write lock sends the batch to the queue), only
/// one caller at a time commits inline, and it commits only its own batch, so it blocks its
/// thread for one commit's fsync (and, once per ~1,000 WAL pages, the writer's share of a
/// checkpoint: the few frames committed while the background pass ran, see ``Checkpointer``);
/// batches that arrive meanwhile go to the queue.
/// When a group transaction fails, its batches are retried one by one, so a bad batch fails
/// alone.
final class GroupCommitter: Sendable {
    typealias Completion = @Sendable (Result<[Bool], KeystoreError>) -> Void

    /// One caller's operations, committed together or not at all, and its writer tag.
    private struct Batch: Sendable {
        let operations: [SealedOperation]
        let writer: UInt64?
    }

    private struct Pending: Sendable {
        let batch: Batch
        let completion: Completion
    }

    private struct State: Sendable {
        var pending: [Pending] = []
        var draining = false
        var closed = false
    }

    /// Counters used only by whoever holds the writer (`State.draining`, taken and released
    /// under `state`'s lock, orders their accesses).
    private final class QueueState: @unchecked Sendable {
            /// The change log's oldest row as far as this writer knows: read at open, moved on by
        /// its own trims, read again whenever it makes a trim look due (another process's
        /// trims leave it below the truth).
        var oldestSequence: Int64?
    }

    private let queue: DispatchQueue
    private let state = Mutex(State())
    /// Held by a caller committing inline, so that ``close()`` can wait for it.
    private let inline = Mutex(())
    /// Batches committed on their caller's thread so far (for tests).
    let inlineCommits = Atomic<Int>(0)
    /// Inline commits that found the write lock held and went to the queue (for tests).
    let lockedInlineCommits = Atomic<Int>(0)
    /// Transactions committed so far, inline or queued, each holding one or more batches
    /// (for tests: shared commits show as fewer transactions than batches).
    let committedTransactions = Atomic<Int>(0)
    /// Batches queued so far (for tests, to know when writers wait together).
    let queuedBatches = Atomic<Int>(0)
    private let queueState = QueueState()
    private let connection: SQLiteConnection
    private let origin: Int64
    private let retention: Int
    private let trimInterval: Int
    private let onCommit: @Sendable (_ changes: [CommittedChange], _ lastSequence: Int64?) -> Void

    /// - Parameter oldestSequence: The change log's oldest row when the database was opened,
    ///   `nil` when the log is empty.
    init(
        connection: SQLiteConnection,
        origin: Int64,
        retention: Int,
        oldestSequence: Int64?,
        onCommit: @escaping @Sendable (_ changes: [CommittedChange], _ lastSequence: Int64?) -> Void
    ) {
        self.queue = DispatchQueue(label: "IdentityBroker.SQLiteKeystore.writer")
        self.connection = connection
        self.origin = origin
        // Bounded so that sequence arithmetic cannot overflow; no log comes near it.
        self.retention = min(max(1, retention), 1 << 40)
        self.trimInterval = max(1, self.retention / 10)
        self.onCommit = onCommit
        queueState.oldestSequence = oldestSequence
    }

    /// Queues a batch; `completion` runs on the writer's queue after its commit.
    func submit(_ operations: [SealedOperation], writer: UInt64? = nil, completion: @escaping Completion) {
        let start = state.withLock { state -> Bool? in
            guard !state.closed else { return nil }
            state.pending.append(Pending(batch: Batch(operations: operations, writer: writer), completion: completion))
            queuedBatches.add(1, ordering: .relaxed)
            guard !state.draining else { return false }
            state.draining = true
            return true
        }
        switch start {
        case nil: completion(.failure(KeystoreError(.storeUnavailable, "the keystore is closed", path: connection.path)))
        case true?: queue.async { self.drain() }
        case false?: break
        }
    }

    /// Stops accepting batches, lets the queued ones finish, and closes the connection.
    func close() {
        let alreadyClosed = state.withLock { state -> Bool in
            defer { state.closed = true }
            return state.closed
        }
        guard !alreadyClosed else { return }
        // An inline commit that started before `closed` was set finishes (and hands what
        // arrived meanwhile to the queue) first; later ones see `closed` and are refused.
        inline.withLock { _ in }
        queue.sync { connection.close() }
    }

    /// Commits `operations` on the calling thread when no commit is running or queued.
    /// - Returns: The commit's result; `nil` when the writer is busy, another caller is
    ///   committing inline, or another connection holds the write lock (nothing was written):
    ///   then ``submit(_:writer:completion:)`` the batch.
    func commitIfIdle(_ operations: [SealedOperation], writer: UInt64?) -> Result<[Bool], KeystoreError>? {
        let attempt = inline.withLockIfAvailable { _ -> Result<[Bool], KeystoreError>? in
            let claimed = state.withLock { state -> Bool in
                guard !state.closed, !state.draining, state.pending.isEmpty else { return false }
                state.draining = true
                return true
            }
            guard claimed else { return nil }
            let result = commit([Batch(operations: operations, writer: writer)], waitingForLocks: false)[0]
            let more = state.withLock { state -> Bool in
                guard state.pending.isEmpty else { return true }
                state.draining = false
                return false
            }
            if more { queue.async { self.drain() } }
            return result
        }
        guard case let result?? = attempt else { return nil }
        switch result {
        case .failure(let error) where error.code == .storeUnavailable:
            lockedInlineCommits.add(1, ordering: .relaxed)
            return nil
        case .failure: break
        case .success: inlineCommits.add(1, ordering: .relaxed)
        }
        return result
    }

    private func drain() {
        while true {
            let group = state.withLock { state -> [Pending] in
                let group = state.pending
                state.pending.removeAll()
                if group.isEmpty { state.draining = false }
                return group
            }
            guard !group.isEmpty else { return }
            let results = commit(group.map(\.batch))
            for (pending, result) in zip(group, results) { pending.completion(result) }
        }
    }

    private func commit(_ group: [Batch], waitingForLocks: Bool = true) -> [Result<[Bool], KeystoreError>] {
        do {
            var changed: [CommittedChange] = []
            var seen: [ItemKey.Exact: Int] = [:]
            func body() throws(KeystoreError) -> ([[Bool]], Int64?) {
                var applied: [[Bool]] = []
                for batch in group {
                    applied.append(try apply(batch.operations, writer: batch.writer, changed: &changed, seen: &seen))
                }
                var lastSequence: Int64?
                for change in changed {
                    try StoreSchema.appendChange(change.key, origin: origin, on: connection)
                    lastSequence = connection.lastInsertedRowID
                }
                return (applied, lastSequence)
            }
            let (applied, lastSequence) = waitingForLocks
                ? try connection.immediateTransaction(body)
                : try connection.immediateTransactionWithoutWaiting(body)
            committedTransactions.add(1, ordering: .relaxed)
            onCommit(changed, lastSequence)
            trimIfDue(lastSequence: lastSequence, added: changed.count, waitingForLocks: waitingForLocks)
            return applied.map { .success($0) }
        } catch {
            guard group.count > 1 else { return [.failure(error)] }
            return group.flatMap { commit([$0], waitingForLocks: waitingForLocks) }
        }
    }

    private func apply(
        _ operations: [SealedOperation], writer: UInt64?, changed: inout [CommittedChange], seen: inout [ItemKey.Exact: Int]
    ) throws(KeystoreError) -> [Bool] {
        var applied: [Bool] = []
        for operation in operations {
            let key: String
            switch operation {
            case .set(let itemKey, let sealed, let version):
                key = itemKey
                try connection.withStatement(StoreSchema.upsert) { statement throws(KeystoreError) in
                    try statement.bind(1, text: itemKey)
                    try statement.bind(2, int64: version)
                    try statement.bind(3, blob: sealed)
                    _ = try statement.step()
                }
            case .remove(let itemKey):
                key = itemKey
                try connection.withStatement(StoreSchema.delete) { statement throws(KeystoreError) in
                    try statement.bind(1, text: itemKey)
                    _ = try statement.step()
                }
            }
            let didApply = connection.changes > 0
            applied.append(didApply)
            guard didApply else { continue }
            if let index = seen[ItemKey.Exact(key)] {
                // Written by several batches of this commit: by one writer only if all are its.
                if changed[index].writer != writer { changed[index].writer = nil }
            } else {
                seen[ItemKey.Exact(key)] = changed.count
                changed.append(CommittedChange(key: key, writer: writer))
            }
        }
        return applied
    }

    /// Keeps the change log near `retention` rows, whoever wrote them: a commit that leaves
    /// more than a tenth of `retention` rows beyond it deletes the oldest, down to
    /// `retention`. Counted by sequence numbers rather than by what this process added, so
    /// that short-lived writers (a CLI command commits once and exits) trim too; at most
    /// `retention` rows go at a time, so a log that grew long is shortened over several
    /// commits, none of which holds the write lock for long. A failed trim is retried at
    /// the next commit. A caller committing inline does not wait for another process's lock
    /// here either: a busy store leaves the trim to a later commit.
    private func trimIfDue(lastSequence: Int64?, added: Int, waitingForLocks: Bool) {
        guard let lastSequence, added > 0 else { return }
        // This commit's own rows prove the log reaches at least this low, whatever was
        // known: a log emptied by hand starts its sequence afresh. Any group member can write
        // the log, so sequence numbers are not trusted to keep the arithmetic in range.
        let ownFirst = lastSequence &- Int64(added) &+ 1
        let retention = Int64(retention)
        let limit = retention + Int64(trimInterval)
        func isDue(_ oldest: Int64) -> Bool {
            let (extent, overflowed) = lastSequence.subtractingReportingOverflow(oldest)
            return overflowed || extent >= limit
        }
        let estimate = min(queueState.oldestSequence ?? ownFirst, ownFirst)
        queueState.oldestSequence = estimate
        guard isDue(estimate) else { return }
        // Due by the estimate, which other processes' trims (or a planted row) can leave far
        // too low: the log's real oldest row (one index seek) decides.
        let found = try? connection.withStatement(StoreSchema.changeBounds) { statement throws(KeystoreError) -> Int64? in
            _ = try statement.step()
            return statement.isNull(0) ? nil : statement.int64(0)
        }
        guard let oldest = found else { return }
        queueState.oldestSequence = oldest
        guard isDue(oldest) else { return }
        let (newestKept, underflowed) = lastSequence.subtractingReportingOverflow(retention)
        guard !underflowed else { return }
        let (chunkEnd, chunkOverflowed) = oldest.addingReportingOverflow(retention - 1)
        let bound = chunkOverflowed ? newestKept : min(newestKept, chunkEnd)
        func trim() throws(KeystoreError) {
            try connection.withStatement(StoreSchema.trimChanges) { statement throws(KeystoreError) in
                try statement.bind(1, int64: bound)
                _ = try statement.step()
            }
        }
        do {
            if waitingForLocks { try trim() } else { try connection.withoutWaiting(trim) }
            queueState.oldestSequence = bound + 1
        } catch {
            // The oldest row is unchanged, so the next commit tries again.
        }
    }
}
