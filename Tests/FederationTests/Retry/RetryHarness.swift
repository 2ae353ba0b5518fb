import Federation
import Logging
import Synchronization

/// Drives a ``RetryRunner`` without real sleeps: records each wait, advances a
/// fake clock by it, and counts attempts.
final class RetryHarness: Sendable {
    private struct State {
        var sleeps: [Duration] = []
        var elapsed: Duration = .zero
        var attempts: [Int] = []
    }

    let start: ContinuousClock.Instant = .now
    private let state = Mutex(State())

    /// The waits the runner asked for, in order.
    var sleeps: [Duration] { state.withLock { $0.sleeps } }
    /// The attempt numbers the operation saw, in order.
    var attempts: [Int] { state.withLock { $0.attempts } }
    /// The fake current time.
    var now: ContinuousClock.Instant { start + state.withLock { $0.elapsed } }

    func recordAttempt(_ attempt: Int) {
        state.withLock { $0.attempts.append(attempt) }
    }

    func runner(policy: RetryPolicy = .standard, quota: RetryQuota? = nil, random: Double = 0.5) -> RetryRunner {
        RetryRunner(
            policy: policy,
            quota: quota ?? RetryQuota(policy: policy),
            sleep: { [self] duration in
                state.withLock {
                    $0.sleeps.append(duration)
                    $0.elapsed += duration
                }
            },
            random: { random },
            now: { [self] in now }
        )
    }

    /// Runs `runner` with an operation that fails with `failures[attempt - 1]`
    /// while there is one, then returns the attempt number.
    func run(
        _ runner: RetryRunner,
        deadline: ContinuousClock.Instant? = nil,
        failures: [RetryTestError]
    ) async throws -> Int {
        try await runner.run(
            deadline: deadline,
            operation: { [self] attempt in
                recordAttempt(attempt)
                if attempt <= failures.count { throw failures[attempt - 1] }
                return attempt
            },
            classify: RetryTestError.classify
        )
    }

    /// Runs `runner` with an operation that always fails with `error`, tagged
    /// with the attempt number, and returns what it threw.
    func runFailing(
        _ runner: RetryRunner,
        deadline: ContinuousClock.Instant? = nil,
        logger: Logger? = nil,
        with error: RetryTestError
    ) async -> (any Error)? {
        do {
            _ = try await runner.run(
                deadline: deadline,
                logger: logger,
                operation: { [self] attempt -> Int in
                    recordAttempt(attempt)
                    var failure = error
                    failure.tag = attempt
                    throw failure
                },
                classify: RetryTestError.classify
            )
            return nil
        } catch {
            return error
        }
    }

    /// Cancels the current task from inside the first attempt, then fails it
    /// with a retryable error; returns what the runner threw.
    func runFailingAfterCancelling(_ runner: RetryRunner) async -> (any Error)? {
        do {
            _ = try await runner.run(
                operation: { [self] attempt -> Int in
                    recordAttempt(attempt)
                    withUnsafeCurrentTask { $0?.cancel() }
                    throw RetryTestError(disposition: .transient, tag: attempt)
                },
                classify: RetryTestError.classify
            )
            return nil
        } catch {
            return error
        }
    }
}
