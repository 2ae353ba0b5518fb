/// Callers of the client's actor waiting for something (the last federation or clear to end,
/// shutdown to finish), resumed together when it happens.
struct Waiters {
    private var continuations: [CheckedContinuation<Void, Never>] = []

    /// Suspends the caller until ``resumeAll()``.
    mutating func add(_ continuation: CheckedContinuation<Void, Never>) {
        continuations.append(continuation)
    }

    /// Resumes every waiter, each once; later ``add(_:)`` calls wait for the next time.
    mutating func resumeAll() {
        let waiting = continuations
        continuations = []
        for continuation in waiting { continuation.resume() }
    }
}
