import Dispatch
import Synchronization

/// The single writer of one database: batches queued while a commit runs are committed
/// together in the next `BEGIN IMMEDIATE … COMMIT`, so concurrent writers share one fsync.
///
/// The connection is used only on `queue` (a serial queue, off Swift's cooperative pool). When
/// a group transaction fails, its batches are retried one by one, so a bad batch fails alone.
/// A key one commit changed, and the writer tag of the batches that changed it when they all
/// carried the same one (`nil`: untagged, or several writers).
struct CommittedChange: Sendable {
    let key: String
    var writer: UInt64?
}

final class GroupCommitter: Sendable {
    typealias Completion = @Sendable (Result<[Bool], KeystoreError>) -> Void

    private struct Pending: Sendable {
        let operations: [SealedOperation]
        let writer: UInt64?
        let completion: Completion
    }

    private struct State: Sendable {
        var pending: [Pending] = []
        var draining = false
        var closed = false
    }

    /// Queue-confined counters.
    private final class QueueState: @unchecked Sendable {
        var rowsSinceTrim = 0
    }

    private let queue: DispatchQueue
    private let state = Mutex(State())
    private let queueState = QueueState()
    private let connection: SQLiteConnection
    private let origin: Int64
    private let retention: Int
    private let trimInterval: Int
    private let onCommit: @Sendable (_ changes: [CommittedChange], _ lastSequence: Int64?) -> Void

    init(
        connection: SQLiteConnection,
        origin: Int64,
        retention: Int,
        onCommit: @escaping @Sendable (_ changes: [CommittedChange], _ lastSequence: Int64?) -> Void
    ) {
        self.queue = DispatchQueue(label: "IdentityBroker.SQLiteKeystore.writer")
        self.connection = connection
        self.origin = origin
        self.retention = max(1, retention)
        self.trimInterval = max(1, retention / 10)
        self.onCommit = onCommit
    }

    /// Queues a batch; `completion` runs on the writer's queue after its commit.
    func submit(_ operations: [SealedOperation], writer: UInt64? = nil, completion: @escaping Completion) {
        let start = state.withLock { state -> Bool? in
            guard !state.closed else { return nil }
            state.pending.append(Pending(operations: operations, writer: writer, completion: completion))
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
        queue.sync { connection.close() }
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
            let results = commit(group)
            for (pending, result) in zip(group, results) { pending.completion(result) }
        }
    }

    private func commit(_ group: [Pending]) -> [Result<[Bool], KeystoreError>] {
        do {
            var changed: [CommittedChange] = []
            var seen: [String: Int] = [:]
            let (applied, lastSequence) = try connection.immediateTransaction { () throws(KeystoreError) -> ([[Bool]], Int64?) in
                var applied: [[Bool]] = []
                for pending in group {
                    applied.append(try apply(pending.operations, writer: pending.writer, changed: &changed, seen: &seen))
                }
                var lastSequence: Int64?
                for change in changed {
                    try StoreSchema.appendChange(change.key, origin: origin, on: connection)
                    lastSequence = connection.lastInsertedRowID
                }
                return (applied, lastSequence)
            }
            onCommit(changed, lastSequence)
            trimIfDue(added: changed.count)
            return applied.map { .success($0) }
        } catch {
            guard group.count > 1 else { return [.failure(error)] }
            return group.flatMap { commit([$0]) }
        }
    }

    private func apply(
        _ operations: [SealedOperation], writer: UInt64?, changed: inout [CommittedChange], seen: inout [String: Int]
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
            if let index = seen[key] {
                // Written by several batches of this commit: by one writer only if all are its.
                if changed[index].writer != writer { changed[index].writer = nil }
            } else {
                seen[key] = changed.count
                changed.append(CommittedChange(key: key, writer: writer))
            }
        }
        return applied
    }

    /// Keeps the change log near `retention` rows: trimmed once a tenth of `retention` rows
    /// were added (counting rows, not commits, so large batches cannot grow the log far past
    /// it); a failed trim is retried at the next commit.
    private func trimIfDue(added: Int) {
        queueState.rowsSinceTrim += added
        guard queueState.rowsSinceTrim >= trimInterval else { return }
        queueState.rowsSinceTrim = 0
        try? connection.withStatement(StoreSchema.trimChanges) { statement throws(KeystoreError) in
            try statement.bind(1, int64: Int64(retention))
            _ = try statement.step()
        }
    }
}
