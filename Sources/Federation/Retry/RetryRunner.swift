package import Logging
import SecureStorage

/// Runs an operation under a ``RetryPolicy``: the AWS SDKs' standard retry mode
/// as pure logic, with the sleep, the random source and the clock injectable.
///
/// The caller classifies each failure into a ``RetryDisposition`` (and may pass
/// a server hint, see ``retryAfterHint(headers:now:)``); the runner decides
/// whether to retry and how long to wait:
///
/// - ``RetryDisposition/doNotRetry`` and `CancellationError` end the call at
///   once, as does a failure while the task is cancelled.
/// - No more than ``RetryPolicy/maxAttempts`` attempts are made.
/// - Each retry takes tokens from the shared ``RetryQuota``; when it refuses,
///   the call ends.
/// - When the call has a deadline, no wait runs past it.
///
/// When the call ends without success, the error of the last attempt is
/// rethrown unchanged. Cancellation during a wait throws `CancellationError`
/// at once.
///
/// ## Backoff
///
/// Before attempt *n + 1* the runner waits
/// `min(random() · 2^(n − 1) seconds, maxBackoff)`. When the failure came with a
/// server hint it waits `max(backoff, min(hint, retryAfterCap))` instead: the
/// hint can lengthen the wait (the server knows when it will take calls again)
/// but never beyond ``RetryPolicy/retryAfterCap``, and it never shortens the
/// jittered backoff, so clients given the same hint do not retry in lockstep.
package struct RetryRunner: Sendable {
    /// Attempts and backoff. The quota settings come from ``quota`` instead.
    package var policy: RetryPolicy
    /// The token bucket shared by every call of one client.
    package let quota: RetryQuota
    /// Waits before a retry; must throw `CancellationError` when the task is
    /// cancelled while it waits.
    package var sleep: @Sendable (Duration) async throws -> Void
    /// A number in `0..<1` (values outside `0...1` are clamped).
    package var random: @Sendable () -> Double
    /// The current time, against which a call's deadline is checked.
    package var now: @Sendable () -> ContinuousClock.Instant

    /// Creates a runner.
    ///
    /// - Parameters:
    ///   - policy: Attempts and backoff.
    ///   - quota: The retry quota the client shares across its calls.
    ///   - sleep: Waits before a retry; defaults to a cancellable `Task.sleep`.
    ///   - random: A random number in `0..<1`; defaults to the system generator.
    ///   - now: The current time; defaults to `ContinuousClock.now`.
    package init(
        policy: RetryPolicy = .standard,
        quota: RetryQuota,
        sleep: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) },
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
        now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }
    ) {
        self.policy = policy
        self.quota = quota
        self.sleep = sleep
        self.random = random
        self.now = now
    }

    /// This runner with its waits ended by `signal` as well as by the task's cancellation:
    /// a wait cut short throws `CancellationError`.
    package func interrupted(by signal: CancellationSignal) -> RetryRunner {
        var runner = self
        let sleep = self.sleep
        runner.sleep = { delay in try await signal.interruptible { try await sleep(delay) } }
        return runner
    }

    /// Runs `operation` until it succeeds or the policy says to stop.
    ///
    /// - Parameters:
    ///   - deadline: When set, bounds the whole call: a retry whose wait would
    ///     end at or after the deadline is not made, and the last error is
    ///     rethrown instead. The runner does not interrupt an attempt in flight;
    ///     the caller bounds each attempt's transport timeout by the time left
    ///     (`deadline - now`). The first attempt always runs.
    ///   - logger: Receives a debug line per retry (message `Retrying after a
    ///     failed attempt`, metadata `broker.attempt` — the attempt about to
    ///     start —, `broker.delay`, `broker.disposition`, `broker.errorType`) and
    ///     one when a retry is refused by the quota or the deadline. Only the
    ///     error's type is logged, never its message.
    ///   - operation: One attempt; receives the attempt number, starting at 1.
    ///   - classify: Decides whether a failure may be retried, with an optional
    ///     server hint for the wait. Not called for `CancellationError`.
    /// - Returns: The result of the first successful attempt.
    /// - Throws: The last attempt's error, unchanged; or `CancellationError`
    ///   when the task is cancelled during a wait.
    package func run<T: Sendable>(
        deadline: ContinuousClock.Instant? = nil,
        logger: Logger? = nil,
        operation: @Sendable (_ attempt: Int) async throws -> T,
        classify: @Sendable (any Error) -> (RetryDisposition, hint: Duration?)
    ) async throws -> T {
        let maxAttempts = max(policy.maxAttempts, 1)
        var attempt = 1
        var lastRetryCost: UInt?
        while true {
            do {
                let value = try await operation(attempt)
                quota.release(success: lastRetryCost)
                return value
            } catch {
                if error is CancellationError || Task.isCancelled { throw error }
                let (disposition, hint) = classify(error)
                guard disposition != .doNotRetry, attempt < maxAttempts else { throw error }

                let delay = delay(afterAttempt: attempt, hint: hint)
                if let deadline, now() + delay >= deadline {
                    logger?.debug(
                        "Not retrying: the wait would pass the call's deadline",
                        metadata: metadata(attempt: attempt + 1, delay: delay, disposition: disposition, error: error)
                    )
                    throw error
                }
                guard let cost = quota.acquire(for: disposition) else {
                    logger?.debug(
                        "Not retrying: the retry quota is exhausted",
                        metadata: metadata(attempt: attempt + 1, delay: delay, disposition: disposition, error: error)
                    )
                    throw error
                }
                lastRetryCost = cost
                logger?.debug(
                    "Retrying after a failed attempt",
                    metadata: metadata(attempt: attempt + 1, delay: delay, disposition: disposition, error: error)
                )
                try await sleep(delay)
                try Task.checkCancellation()
                attempt += 1
            }
        }
    }

    /// The wait before the attempt that follows failed attempt `attempt`
    /// (1-based): `min(random() · 2^(attempt − 1) s, maxBackoff)`, lengthened
    /// to `min(hint, retryAfterCap)` when a hint is given. Calls ``random`` once.
    package func delay(afterAttempt attempt: Int, hint: Duration?) -> Duration {
        let maxBackoff = max(policy.maxBackoff, .zero)
        let sample = random()
        let unit = sample.isFinite ? min(max(sample, 0), 1) : 0
        let exponent = min(max(attempt - 1, 0), 62)
        let seconds = unit * Double(UInt64(1) << UInt64(exponent))
        var delay = seconds >= maxBackoff.timeInterval ? maxBackoff : .seconds(seconds)
        if let hint {
            let honoured = min(max(hint, .zero), max(policy.retryAfterCap, .zero))
            delay = max(delay, honoured)
        }
        return delay
    }

    private func metadata(
        attempt: Int,
        delay: Duration,
        disposition: RetryDisposition,
        error: any Error
    ) -> Logger.Metadata {
        var metadata: Logger.Metadata = [
            "broker.attempt": "\(attempt)",
            "broker.delay": "\(delay)",
            "broker.disposition": "\(disposition)",
            "broker.errorType": "\(String(reflecting: type(of: error)))",
        ]
        // What failed, not only the wrapper every service call's failure comes in.
        if let failure = error as? AttemptFailure { metadata["broker.error"] = "\(failure.error.code)" }
        return metadata
    }
}
