/// How the broker retries a failed call to Cognito Identity.
///
/// The policy follows the AWS SDKs' *standard* retry mode:
///
/// - Up to ``maxAttempts`` attempts in all (the first one included).
/// - Before attempt *n + 1* the broker waits a random, exponentially growing
///   time: `min(random(0, 1) · 2^(n − 1) seconds, maxBackoff)`
///   ("full jitter").
/// - A server hint (`Retry-After`, `x-amz-retry-after`) can lengthen that wait,
///   never beyond ``retryAfterCap``.
/// - Every retry spends tokens from a token bucket that a client shares across
///   all of its calls: ``retryCost`` tokens for a transient error or throttling,
///   ``timeoutRetryCost`` for a timeout. When the bucket holds too few tokens the
///   broker stops retrying, so a failing service is not hammered. A call that
///   succeeds puts tokens back: the cost of the retry that succeeded, or
///   ``noRetryIncrement`` when the first attempt succeeded, never beyond
///   ``initialRetryTokens``.
///
/// Only failures that may pass are retried: connection errors, timeouts,
/// HTTP 500/502/503/504, truncated responses and throttling. Errors such as
/// `NotAuthorizedException` or `InvalidParameterException` are never retried,
/// and neither is task cancellation.
///
/// ```swift
/// var policy = RetryPolicy.standard
/// policy.maxAttempts = 5
/// ```
public struct RetryPolicy: Sendable, Hashable {
    /// The number of attempts in all, the first one included.
    ///
    /// Defaults to `3`. `1` disables retries; values below `1` count as `1`.
    public var maxAttempts: Int

    /// The longest backoff before a retry.
    ///
    /// Defaults to 20 seconds, as in the AWS SDKs.
    public var maxBackoff: Duration

    /// The longest wait the broker accepts from a server hint
    /// (`Retry-After` or `x-amz-retry-after`).
    ///
    /// A longer hint is cut to this value. Defaults to 20 seconds.
    public var retryAfterCap: Duration

    /// The size of the retry-quota token bucket, which starts full.
    ///
    /// Defaults to `500` tokens.
    public var initialRetryTokens: UInt

    /// The tokens a retry after a transient error or throttling takes.
    ///
    /// Defaults to `5`, so a full bucket pays for 100 such retries.
    public var retryCost: UInt

    /// The tokens a retry after a timeout takes.
    ///
    /// Defaults to `10`.
    public var timeoutRetryCost: UInt

    /// The tokens a call puts back when its first attempt succeeds.
    ///
    /// A call that succeeds after retrying puts back the cost of the retry
    /// that succeeded instead. Defaults to `1`.
    public var noRetryIncrement: UInt

    /// Creates a retry policy; every parameter defaults to the AWS SDKs'
    /// standard retry mode.
    ///
    /// - Parameters:
    ///   - maxAttempts: Attempts in all, the first one included; `1` disables retries.
    ///   - maxBackoff: The longest backoff before a retry.
    ///   - retryAfterCap: The longest wait accepted from a server hint.
    ///   - initialRetryTokens: The size of the retry-quota token bucket.
    ///   - retryCost: Tokens a retry after a transient error or throttling takes.
    ///   - timeoutRetryCost: Tokens a retry after a timeout takes.
    ///   - noRetryIncrement: Tokens a call whose first attempt succeeded puts back.
    public init(
        maxAttempts: Int = 3,
        maxBackoff: Duration = .seconds(20),
        retryAfterCap: Duration = .seconds(20),
        initialRetryTokens: UInt = 500,
        retryCost: UInt = 5,
        timeoutRetryCost: UInt = 10,
        noRetryIncrement: UInt = 1
    ) {
        self.maxAttempts = maxAttempts
        self.maxBackoff = maxBackoff
        self.retryAfterCap = retryAfterCap
        self.initialRetryTokens = initialRetryTokens
        self.retryCost = retryCost
        self.timeoutRetryCost = timeoutRetryCost
        self.noRetryIncrement = noRetryIncrement
    }

    /// The AWS SDKs' standard retry mode: 3 attempts, backoff up to 20 seconds,
    /// server hints honoured up to 20 seconds, and a 500-token retry quota.
    public static let standard = RetryPolicy()

    /// A single attempt and no retries.
    ///
    /// Where an optional policy is expected, spell it `RetryPolicy.none`:
    /// a bare `.none` means `Optional.none` there.
    public static let none = RetryPolicy(maxAttempts: 1)
}
