import SecureStorage
import Synchronization

/// Combines the batches of concurrent ``PostgresKeystore/commit(_:)`` calls into one statement.
///
/// PostgreSQL serialises every transaction that `NOTIFY`s through its commit, WAL flush
/// included, so one commit per caller would cap throughput at one flush per commit. Instead,
/// batches queue here (``PostgresGrouper``); up to `maximumInFlight` groups (each on one
/// pooled connection) take what is waiting, at most `maximumOperations` operations, and
/// apply it in one statement. A caller that finds a slot free commits at once, on its task.
///
/// A group never names a key twice, so one statement can apply it, and a batch whose key is
/// in the group (or in a batch left waiting) waits for a later group: writes to one key apply
/// in arrival order, and the versioned rule decides between them in the database as it would
/// for separate commits. A batch naming one key twice goes alone, as a transaction.
///
/// A group that fails with a server error applied nothing (the server commits it in the same
/// statement, only once the statement succeeded; for the rare exception, a statement timeout
/// that lands while the server commits, see ``PostgresSchema/commitDistinct(sets:removes:namespace:origin:call:fence:on:logger:)``), so its
/// batches are retried one by one and a bad batch fails alone, for as long as the group's
/// own time (`retryBudget`, the operation timeout) lasts; the batches left then get the
/// group's error. Without that bound a group of 256 batches held the commit slot for 256
/// timeouts, and applied batches long after their callers were told they failed. Any other
/// failure (server unreachable, timeout, connection lost with the outcome unknown) is
/// reported to every caller in the group; nothing is retried whose outcome is unknown.
final class PostgresGroupCommitter: Sendable {
    typealias Outcome = Result<[Bool], KeystoreError>
    /// Applies a group: batches with distinct keys, or one batch naming a key twice; and tells
    /// the change feed what applied, as soon as it knows, whether or not the callers still
    /// wait (one past its deadline was told the commit failed, but the change happened).
    typealias Execute = @Sendable (_ batches: [Batch], _ distinct: Bool) async -> Result<[[Bool]], KeystoreError>

    struct Batch: Sendable {
        let operations: [SealedOperation]
        /// The batch's keys; `nil` when it names a key twice.
        let keys: Set<String>?
        /// Who committed it, for the change feed (``KeystoreBatch/writer``).
        let writer: UInt64?
    }

    private let grouper: PostgresGrouper<Batch, [Bool]>

    init(
        maximumInFlight: Int, maximumOperations: Int, deadlines: DeadlineQueue, retryBudget: Duration,
        closedError: @escaping @Sendable () -> KeystoreError,
        timeoutError: @escaping @Sendable () -> KeystoreError,
        execute: @escaping Execute
    ) {
        let maximumOperations = max(1, maximumOperations)
        grouper = PostgresGrouper(
            maximumInFlight: maximumInFlight, deadlines: deadlines, closedError: closedError, timeoutError: timeoutError,
            select: { waiting in Self.select(waiting, maximumOperations: maximumOperations) },
            run: { group in
                let distinct = group.count > 1 || group[0].keys != nil
                let started = ContinuousClock.now
                switch await execute(group, distinct) {
                case .success(let results):
                    return results.map { .success($0) }
                case .failure(let error) where group.count > 1 && error.code != .storeUnavailable:
                    var outcomes: [Outcome] = []
                    for batch in group {
                        guard ContinuousClock.now - started < retryBudget else {
                            outcomes.append(.failure(error))
                            continue
                        }
                        outcomes.append(await execute([batch], true).map { $0[0] })
                    }
                    return outcomes
                case .failure(let error):
                    return group.map { _ in .failure(error) }
                }
            })
    }

    /// Returns the batch's per-operation results once a group holding it committed.
    /// Cancelled or past its deadline while still queued, the batch is withdrawn (never
    /// applied); once its group runs, it is too late to withdraw, and the caller gets the
    /// error while the outcome is left to the group.
    func commit(_ operations: [SealedOperation], writer: UInt64?) async -> Outcome {
        var keys: Set<String>? = Set(minimumCapacity: operations.count)
        for operation in operations where keys?.insert(operation.key).inserted == false { keys = nil }
        return await grouper.submit(Batch(operations: operations, keys: keys, writer: writer))
    }

    /// How many groups ran (for tests: fewer than the batches committed means they combined).
    var groupsRun: Int { grouper.groupsRun }

    /// Fails every queued batch; later commits fail at once. Groups already running finish.
    func close() { grouper.close() }

    /// The next group: the first batch, and the later ones whose keys are disjoint from every
    /// batch before them that is not taken, within `maximumOperations`.
    private static func select(_ waiting: [Batch], maximumOperations: Int) -> [Int] {
        guard var taken = waiting[0].keys else { return [0] }
        var chosen = [0]
        var operations = waiting[0].operations.count
        var held: Set<String> = []
        for index in waiting.indices.dropFirst() {
            let batch = waiting[index]
            if let keys = batch.keys, operations + batch.operations.count <= maximumOperations,
               taken.isDisjoint(with: keys), held.isDisjoint(with: keys) {
                chosen.append(index)
                taken.formUnion(keys)
                operations += batch.operations.count
            } else {
                // Later batches must not overtake it on any of its keys.
                held.formUnion(batch.keys ?? Set(batch.operations.map(\.key)))
            }
        }
        return chosen
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
