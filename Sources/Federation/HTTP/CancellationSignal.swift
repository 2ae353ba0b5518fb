import Synchronization

/// A cancellation that is not the calling task's: once fired, the transfers and waits that
/// watch it end at once with `CancellationError`, while the task that awaits them is left
/// uncancelled.
///
/// Why not task cancellation: a client's shutdown must stop the federations in flight
/// without cancelling the callers' tasks (a request handler, say, that still has an answer
/// to send). Running each federation as a task of its own gave the client a task to
/// cancel, at the price of a task created, scheduled and awaited per federation, two extra
/// hand-offs between threads on every call. The federation now runs in the caller's task,
/// and the client's shutdown fires this signal instead, which its transport and its retry
/// waits watch (``HTTPRequest/cancellation``, ``interruptible(_:)``).
///
/// Firing is final and idempotent. Handlers run once, on the thread that fires, outside the
/// lock; a handler registered after the signal fired runs at once. A handler taken by a
/// firing may run just after its operation returned, so it must be harmless then (cancelling
/// a finished transfer or task is).
package final class CancellationSignal: Sendable {
    private struct State {
        var fired = false
        var nextHandler = 0
        var handlers: [Int: @Sendable () -> Void] = [:]
    }

    private let state = Mutex(State())

    package init() {}

    /// Whether ``fire()`` was called.
    package var isFired: Bool { state.withLock { $0.fired } }

    /// Fires the signal: every handler registered now runs, and every later one runs as it
    /// is registered.
    package func fire() {
        let handlers: [@Sendable () -> Void] = state.withLock { state in
            guard !state.fired else { return [] }
            state.fired = true
            defer { state.handlers = [:] }
            return Array(state.handlers.values)
        }
        for handler in handlers { handler() }
    }

    /// Runs `operation`, calling `onFire` if the signal fires before it returns (or has
    /// already fired), like `withTaskCancellationHandler` does for the task's cancellation.
    package func withHandler<T, E: Error>(
        onFire: @escaping @Sendable () -> Void,
        operation: () async throws(E) -> T
    ) async throws(E) -> T {
        let registration: Int? = state.withLock { state in
            guard !state.fired else { return nil }
            let id = state.nextHandler
            state.nextHandler += 1
            state.handlers[id] = onFire
            return id
        }
        guard let registration else {
            onFire()
            return try await operation()
        }
        defer { _ = state.withLock { $0.handlers.removeValue(forKey: registration) } }
        return try await operation()
    }

    /// Runs `operation` in a task of its own, cancelled when this signal fires or the
    /// caller's task is cancelled, for waits that only task cancellation can end (a
    /// `Task.sleep`, a transport that knows nothing of this signal).
    ///
    /// This costs a task per call; the paths taken on every federation (the curl
    /// transport) watch the signal directly instead.
    package func interruptible<T: Sendable>(
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        // Fired already: the operation never starts (a request is not sent).
        guard !isFired else { throw CancellationError() }
        let work = Task { try await operation() }
        return try await withHandler(onFire: { work.cancel() }) {
            try await withTaskCancellationHandler {
                try await work.value
            } onCancel: {
                work.cancel()
            }
        }
    }
}
