import SecureStorage
import Synchronization

/// Combines the requests of concurrent callers into groups, each carried out in one round
/// trip, with up to `maximumInFlight` groups running at once.
///
/// A caller that finds a slot free runs its own group on its own task (no task hop, the
/// common case at low concurrency), then hands any requests that arrived meanwhile to a new
/// task. Requests that find every slot busy wait; whoever finishes a group takes the next
/// one. Each request has its own deadline: a request still waiting when it passes (or whose
/// caller is cancelled) is withdrawn, never carried out; once its group runs, the caller
/// gets the deadline's error while the group completes for the others.
final class PostgresGrouper<Request: Sendable, Response: Sendable>: Sendable {
    typealias Outcome = Result<Response, KeystoreError>
    /// Chooses which of the waiting requests (in arrival order; never empty) form the next
    /// group: their indices, in order, the first one included.
    typealias Select = @Sendable (_ waiting: [Request]) -> [Int]
    /// Carries out a group; one outcome per request, in order.
    typealias Run = @Sendable (_ group: [Request]) async -> [Outcome]

    private struct Waiting: Sendable {
        let id: Int
        let request: Request
    }

    private struct Caller: Sendable {
        let continuation: CheckedContinuation<Outcome, Never>
        let deadline: UInt64
    }

    private enum Start { case refuse(KeystoreError), runAlone, queue(Int) }
    private enum Action { case refuse(KeystoreError), drain, wait }

    private struct State: Sendable {
        var waiting: [Waiting] = []
        var callers: [Int: Caller] = [:]
        var inFlight = 0
        var nextID = 0
        var closed = false
    }

    private let state = Mutex(State())
    private let groups = Atomic<Int>(0)
    private let maximumInFlight: Int
    private let deadlines: DeadlineQueue
    private let select: Select
    private let run: Run
    private let closedError: @Sendable () -> KeystoreError
    private let timeoutError: @Sendable () -> KeystoreError

    init(
        maximumInFlight: Int, deadlines: DeadlineQueue,
        closedError: @escaping @Sendable () -> KeystoreError,
        timeoutError: @escaping @Sendable () -> KeystoreError,
        select: @escaping Select, run: @escaping Run
    ) {
        self.maximumInFlight = max(1, maximumInFlight)
        self.deadlines = deadlines
        self.closedError = closedError
        self.timeoutError = timeoutError
        self.select = select
        self.run = run
    }

    /// How many groups ran (for tests: fewer than the requests means they combined).
    var groupsRun: Int { groups.load(ordering: .relaxed) }

    /// Returns the outcome of `request` once a group holding it ran, or the deadline's (or
    /// cancellation's) error.
    func submit(_ request: Request) async -> Outcome {
        let start = state.withLock { state -> Start in
            if state.closed { return .refuse(closedError()) }
            if Task.isCancelled { return .refuse(Self.cancelled) }
            defer { state.nextID += 1 }
            guard state.inFlight < maximumInFlight else { return .queue(state.nextID) }
            // Nothing waits when a slot is free (a slot is freed only then), so this request
            // is a group of its own; its deadline is the group's.
            state.inFlight += 1
            return .runAlone
        }
        switch start {
        case .refuse(let error):
            return .failure(error)
        case .runAlone:
            groups.add(1, ordering: .relaxed)
            let outcome = await run([request])[0]
            let more = state.withLock { state -> Bool in
                guard state.waiting.isEmpty else { return true }
                state.inFlight -= 1
                return false
            }
            // The caller's own result must not wait for other callers' groups.
            if more { Task { await self.drain() } }
            return outcome
        case .queue(let id):
            return await queue(request, id: id)
        }
    }

    private static var cancelled: KeystoreError { KeystoreError(.storeUnavailable, "the operation was cancelled") }

    private func queue(_ request: Request, id: Int) async -> Outcome {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
                let deadline = deadlines.register { [self] in abandon(id, with: timeoutError()) }
                let action = state.withLock { state -> Action in
                    if state.closed { return .refuse(closedError()) }
                    if Task.isCancelled { return .refuse(Self.cancelled) }
                    state.waiting.append(Waiting(id: id, request: request))
                    state.callers[id] = Caller(continuation: continuation, deadline: deadline)
                    // A slot may have been freed since every one was busy; then nobody would drain.
                    guard state.inFlight < maximumInFlight else { return .wait }
                    state.inFlight += 1
                    return .drain
                }
                switch action {
                case .refuse(let error):
                    deadlines.cancel(deadline)
                    continuation.resume(returning: .failure(error))
                case .drain: Task { await self.drain() }
                case .wait: break
                }
            }
        } onCancel: {
            abandon(id, with: Self.cancelled)
        }
    }

    /// Fails every waiting request; later ones fail at once. Groups already running finish.
    func close() {
        let callers = state.withLock { state -> [Caller] in
            state.closed = true
            let callers = state.waiting.compactMap { state.callers.removeValue(forKey: $0.id) }
            state.waiting.removeAll()
            return callers
        }
        for caller in callers {
            deadlines.cancel(caller.deadline)
            caller.continuation.resume(returning: .failure(closedError()))
        }
    }

    /// Withdraws the request if it still waits, and resumes its caller with `error`.
    private func abandon(_ id: Int, with error: KeystoreError) {
        let caller = state.withLock { state -> Caller? in
            if let index = state.waiting.firstIndex(where: { $0.id == id }) { state.waiting.remove(at: index) }
            return state.callers.removeValue(forKey: id)
        }
        guard let caller else { return }
        deadlines.cancel(caller.deadline)
        caller.continuation.resume(returning: .failure(error))
    }

    private func finish(_ id: Int, _ outcome: Outcome) {
        guard let caller = state.withLock({ $0.callers.removeValue(forKey: id) }) else { return }
        deadlines.cancel(caller.deadline)
        caller.continuation.resume(returning: outcome)
    }

    /// Runs groups until nothing waits.
    private func drain() async {
        while let group = nextGroup() { await runGroup(group) }
    }

    private func runGroup(_ group: [Waiting]) async {
        groups.add(1, ordering: .relaxed)
        let outcomes = await run(group.map(\.request))
        for (request, outcome) in zip(group, outcomes) { finish(request.id, outcome) }
    }

    /// Takes the next group, or frees this slot when nothing waits.
    private func nextGroup() -> [Waiting]? {
        state.withLock { state -> [Waiting]? in
            guard !state.waiting.isEmpty else {
                state.inFlight -= 1
                return nil
            }
            let chosen = select(state.waiting.map(\.request))
            var group: [Waiting] = []
            group.reserveCapacity(chosen.count)
            for index in chosen { group.append(state.waiting[index]) }
            for index in chosen.reversed() { state.waiting.remove(at: index) }
            return group
        }
    }
}
