import SecureStorage
import Synchronization

/// Combines the batches of concurrent ``PostgresKeystore/commit(_:)`` calls into one statement.
///
/// PostgreSQL serialises every transaction that `NOTIFY`s through its commit, WAL flush
/// included, so one commit per caller would cap throughput at one flush per commit. Instead,
/// batches queue here; up to `maximumInFlight` drains (each on one pooled connection) take
/// what is waiting, at most `maximumOperations` operations, and apply it in one statement.
/// A lone caller starts a drain at once and waits for nothing.
///
/// A group never names a key twice, so one statement can apply it, and a batch whose key is
/// in the group (or in a batch left waiting) waits for a later group: writes to one key apply
/// in arrival order, and the versioned rule decides between them in the database as it would
/// for separate commits. A batch naming one key twice goes alone, as a transaction.
///
/// A group that fails with a server error applied nothing (a statement is atomic), so its
/// batches are retried one by one and a bad batch fails alone. Any other failure (server
/// unreachable, timeout, connection lost with the outcome unknown) is reported to every
/// caller in the group; nothing is retried whose outcome is unknown.
final class PostgresGroupCommitter: Sendable {
    typealias Outcome = Result<[Bool], KeystoreError>
    /// Applies a group: batches with distinct keys, or one batch naming a key twice.
    typealias Execute = @Sendable (_ batches: [[SealedOperation]], _ distinct: Bool) async -> Result<[[Bool]], KeystoreError>

    private struct Pending: Sendable {
        let id: Int
        let operations: [SealedOperation]
        /// The batch's keys; `nil` when it names a key twice.
        let keys: Set<String>?
        let continuation: CheckedContinuation<Outcome, Never>
    }

    private struct State: Sendable {
        var pending: [Pending] = []
        var inFlight = 0
        var nextID = 0
        var closed = false
    }

    private let state = Mutex(State())
    private let groups = Atomic<Int>(0)
    private let maximumInFlight: Int
    private let maximumOperations: Int
    private let execute: Execute
    private let closedError: @Sendable () -> KeystoreError

    init(
        maximumInFlight: Int, maximumOperations: Int,
        closedError: @escaping @Sendable () -> KeystoreError, execute: @escaping Execute
    ) {
        self.maximumInFlight = max(1, maximumInFlight)
        self.maximumOperations = max(1, maximumOperations)
        self.closedError = closedError
        self.execute = execute
    }

    /// Queues `operations` and returns their results once a group holding them committed.
    /// Cancelled while still queued, the batch is withdrawn (never applied) and a
    /// cancellation error returned; once its group runs, it is too late to withdraw.
    func commit(_ operations: [SealedOperation]) async -> Outcome {
        var keys: Set<String>? = Set(minimumCapacity: operations.count)
        for operation in operations where keys?.insert(operation.key).inserted == false { keys = nil }
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
                enum Action { case refuse(KeystoreError), drain, wait }
                let action = state.withLock { state -> Action in
                    if state.closed { return .refuse(closedError()) }
                    if Task.isCancelled { return .refuse(KeystoreError(.storeUnavailable, "the operation was cancelled")) }
                    state.pending.append(Pending(id: id, operations: operations, keys: keys, continuation: continuation))
                    guard state.inFlight < maximumInFlight else { return .wait }
                    state.inFlight += 1
                    return .drain
                }
                switch action {
                case .refuse(let error): continuation.resume(returning: .failure(error))
                case .drain: Task { await self.drain() }
                case .wait: break
                }
            }
        } onCancel: {
            let withdrawn = state.withLock { state -> Pending? in
                guard let index = state.pending.firstIndex(where: { $0.id == id }) else { return nil }
                return state.pending.remove(at: index)
            }
            withdrawn?.continuation.resume(returning: .failure(KeystoreError(.storeUnavailable, "the operation was cancelled")))
        }
    }

    /// How many groups ran (for tests: fewer than the batches committed means they combined).
    var groupsRun: Int { groups.load(ordering: .relaxed) }

    /// Fails every queued batch; later commits fail at once. Groups already running finish.
    func close() {
        let pending = state.withLock { state -> [Pending] in
            state.closed = true
            defer { state.pending.removeAll() }
            return state.pending
        }
        for batch in pending { batch.continuation.resume(returning: .failure(closedError())) }
    }

    /// Runs groups until nothing is queued.
    private func drain() async {
        while let group = nextGroup() {
            groups.add(1, ordering: .relaxed)
            let distinct = group.count > 1 || group[0].keys != nil
            let outcome = await execute(group.map(\.operations), distinct)
            switch outcome {
            case .success(let results):
                for (batch, result) in zip(group, results) { batch.continuation.resume(returning: .success(result)) }
            case .failure(let error) where group.count > 1 && error.code != .storeUnavailable:
                for batch in group {
                    let alone = await execute([batch.operations], true)
                    batch.continuation.resume(returning: alone.map { $0[0] })
                }
            case .failure(let error):
                for batch in group { batch.continuation.resume(returning: .failure(error)) }
            }
        }
    }

    /// Takes the next group off the queue, or ends this drain when the queue is empty.
    private func nextGroup() -> [Pending]? {
        state.withLock { state -> [Pending]? in
            guard !state.pending.isEmpty else {
                state.inFlight -= 1
                return nil
            }
            let first = state.pending[0]
            guard var taken = first.keys else {
                state.pending.removeFirst()
                return [first]
            }
            var group = [first]
            var operations = first.operations.count
            var waiting: Set<String> = []
            var left: [Pending] = []
            for batch in state.pending.dropFirst() {
                if let keys = batch.keys, operations + batch.operations.count <= maximumOperations,
                   taken.isDisjoint(with: keys), waiting.isDisjoint(with: keys) {
                    group.append(batch)
                    taken.formUnion(keys)
                    operations += batch.operations.count
                } else {
                    // Later batches must not overtake it on any of its keys.
                    waiting.formUnion(batch.keys ?? Set(batch.operations.map(\.key)))
                    left.append(batch)
                }
            }
            state.pending = left
            return group
        }
    }
}

extension SealedOperation {
    /// The key the operation writes.
    var key: String {
        switch self {
        case .set(let key, _, _), .remove(let key): key
        }
    }
}
