import PostgresNIO
import SecureStorage
import Synchronization

/// Deadlines of one fixed length, watched by one task that sleeps until the earliest.
///
/// A `Task.sleep` per operation left a timer behind in the global executor until it fired,
/// even after the operation had finished and cancelled it: at a thousand federations a second
/// and a 10-second limit, tens of thousands of live timers and a task each. All deadlines
/// of a keystore have the same length, so they expire in the order they were set: a FIFO
/// queue is enough, and one sleeping task serves them all.
final class DeadlineQueue: Sendable {
    private struct Entry: Sendable {
        let id: UInt64
        let deadline: ContinuousClock.Instant
    }

    private struct State: Sendable {
        var order = CircularBuffer<Entry>()
        var handlers: [UInt64: @Sendable () -> Void] = [:]
        var nextID: UInt64 = 0
        var watching = false
    }

    /// The length of every deadline.
    let timeout: Duration
    private let state = Mutex(State())

    init(_ timeout: Duration) {
        self.timeout = timeout
    }

    /// Calls `onExpire` once `timeout` has passed, unless ``cancel(_:)`` comes first.
    func register(_ onExpire: @escaping @Sendable () -> Void) -> UInt64 {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        let (id, start) = state.withLock { state -> (UInt64, Bool) in
            let id = state.nextID
            state.nextID += 1
            // Entries whose operations finished need not wait for the watcher to go.
            while let first = state.order.first, state.handlers[first.id] == nil { state.order.removeFirst() }
            state.order.append(Entry(id: id, deadline: deadline))
            state.handlers[id] = onExpire
            defer { state.watching = true }
            return (id, !state.watching)
        }
        if start { Task { await self.watch() } }
        return id
    }

    func cancel(_ id: UInt64) {
        _ = state.withLock { $0.handlers.removeValue(forKey: id) }
    }

    private func watch() async {
        while true {
            let now = ContinuousClock.now
            let (expired, next) = state.withLock { state -> ([@Sendable () -> Void], ContinuousClock.Instant?) in
                var expired: [@Sendable () -> Void] = []
                while let first = state.order.first {
                    guard let handler = state.handlers[first.id] else {
                        state.order.removeFirst()
                        continue
                    }
                    guard first.deadline <= now else { break }
                    state.order.removeFirst()
                    state.handlers[first.id] = nil
                    expired.append(handler)
                }
                guard let first = state.order.first else {
                    state.watching = false
                    return (expired, nil)
                }
                return (expired, first.deadline)
            }
            for handler in expired { handler() }
            guard let next else { return }
            try? await Task.sleep(until: next, clock: .continuous)
        }
    }
}

/// Runs one keystore operation with a time limit that holds even when the operation waits on
/// something slow to notice cancellation (a connection pool retrying an unreachable server):
/// the caller is resumed at the deadline with the given error, and the operation is cancelled
/// and left to wind down on its own.
enum OperationDeadline {
    private struct State<T: Sendable>: Sendable {
        var continuation: CheckedContinuation<Result<T, KeystoreError>, Never>?
        var task: Task<Void, Never>?
        var deadline: UInt64?
        var pending: Result<T, KeystoreError>?
    }

    /// The state, in a class so that escaping closures can share it.
    private final class Box<T: Sendable>: Sendable {
        let state = Mutex(State<T>())
    }

    static func run<T: Sendable>(
        _ timeout: Duration,
        onTimeout: @escaping @Sendable () -> KeystoreError,
        _ body: @escaping @Sendable () async throws(KeystoreError) -> T
    ) async throws(KeystoreError) -> T {
        try await run(DeadlineQueue(timeout), onTimeout: onTimeout, body)
    }

    /// - Parameter cancellable: Whether the caller's cancellation ends the wait; `false` for
    ///   work done on behalf of other callers too (a commit group), which only its deadline
    ///   ends.
    static func run<T: Sendable>(
        _ deadlines: DeadlineQueue,
        cancellable: Bool = true,
        onTimeout: @escaping @Sendable () -> KeystoreError,
        _ body: @escaping @Sendable () async throws(KeystoreError) -> T
    ) async throws(KeystoreError) -> T {
        let box = Box<T>()
        /// Resumes the caller once; later results are dropped. Cancels the operation.
        @Sendable func finish(_ result: Result<T, KeystoreError>) {
            let (continuation, task, deadline) = box.state.withLock { state in
                guard let continuation = state.continuation else {
                    if state.pending == nil { state.pending = result }
                    return (nil as CheckedContinuation<Result<T, KeystoreError>, Never>?, nil as Task<Void, Never>?, nil as UInt64?)
                }
                state.continuation = nil
                return (continuation, state.task, state.deadline)
            }
            guard let continuation else { return }
            continuation.resume(returning: result)
            task?.cancel()
            if let deadline { deadlines.cancel(deadline) }
        }
        let wait = {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, KeystoreError>, Never>) in
                // A caller cancelled before it called has its answer already (the cancellation
                // handler runs first): nothing is started, not even for the moment it would take
                // the cancellation to reach it.
                if let answered = box.state.withLock({ $0.pending }) {
                    continuation.resume(returning: answered)
                    return
                }
                let operation = Task {
                    do throws(KeystoreError) {
                        finish(.success(try await body()))
                    } catch {
                        finish(.failure(error))
                    }
                }
                let deadline = deadlines.register { finish(.failure(onTimeout())) }
                let early = box.state.withLock { state -> Result<T, KeystoreError>? in
                    state.task = operation
                    state.deadline = deadline
                    if let pending = state.pending { return pending }
                    state.continuation = continuation
                    return nil
                }
                if let early {
                    // Cancelled before it began waiting: the operation must not run on unbounded.
                    operation.cancel()
                    deadlines.cancel(deadline)
                    continuation.resume(returning: early)
                }
            }
        }
        let result: Result<T, KeystoreError>
        if cancellable {
            result = await withTaskCancellationHandler(operation: wait) {
                finish(.failure(KeystoreError(.storeUnavailable, "the operation was cancelled")))
            }
        } else {
            result = await wait()
        }
        return try result.get()
    }
}
