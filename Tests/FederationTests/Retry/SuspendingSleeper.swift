import Synchronization

/// A sleep that never ends by itself: it signals that it started, then waits
/// until its task is cancelled and throws `CancellationError`.
final class SuspendingSleeper: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Void, any Error>?
        var cancelled = false
    }

    private let state = Mutex(State())
    /// Yields once each time a sleep starts.
    let started: AsyncStream<Void>
    private let startedContinuation: AsyncStream<Void>.Continuation

    init() {
        (started, startedContinuation) = AsyncStream.makeStream()
    }

    func sleep(_ duration: Duration) async throws {
        startedContinuation.yield()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelled = state.withLock { state -> Bool in
                    if state.cancelled { return true }
                    state.continuation = continuation
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let continuation = state.withLock { state -> CheckedContinuation<Void, any Error>? in
                state.cancelled = true
                defer { state.continuation = nil }
                return state.continuation
            }
            continuation?.resume(throwing: CancellationError())
        }
    }
}
