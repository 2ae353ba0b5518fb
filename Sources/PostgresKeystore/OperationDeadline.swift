import SecureStorage
import Synchronization

/// Runs one keystore operation with a time limit that holds even when the operation waits on
/// something slow to notice cancellation (a connection pool retrying an unreachable server):
/// the caller is resumed at the deadline with the given error, and the operation is cancelled
/// and left to wind down on its own.
enum OperationDeadline {
    private struct State<T: Sendable>: Sendable {
        var continuation: CheckedContinuation<Result<T, KeystoreError>, Never>?
        var tasks: [Task<Void, Never>] = []
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
        let box = Box<T>()
        /// Resumes the caller once; later results are dropped. Cancels the other task.
        @Sendable func finish(_ result: Result<T, KeystoreError>) {
            let (continuation, tasks) = box.state.withLock { state in
                guard let continuation = state.continuation else {
                    if state.pending == nil { state.pending = result }
                    return (nil as CheckedContinuation<Result<T, KeystoreError>, Never>?, [Task<Void, Never>]())
                }
                state.continuation = nil
                return (continuation, state.tasks)
            }
            guard let continuation else { return }
            continuation.resume(returning: result)
            for task in tasks { task.cancel() }
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, KeystoreError>, Never>) in
                let operation = Task {
                    do throws(KeystoreError) {
                        finish(.success(try await body()))
                    } catch {
                        finish(.failure(error))
                    }
                }
                let timer = Task {
                    do {
                        try await Task.sleep(for: timeout)
                        finish(.failure(onTimeout()))
                    } catch {}
                }
                let early = box.state.withLock { state -> Result<T, KeystoreError>? in
                    state.tasks = [operation, timer]
                    if let pending = state.pending { return pending }
                    state.continuation = continuation
                    return nil
                }
                if let early {
                    operation.cancel()
                    timer.cancel()
                    continuation.resume(returning: early)
                }
            }
        } onCancel: {
            finish(.failure(KeystoreError(.storeUnavailable, "the operation was cancelled")))
        }
        return try result.get()
    }
}
