/// What the caller decided about a failed attempt: whether a retry may help,
/// and what it costs from the ``RetryQuota``.
package enum RetryDisposition: Sendable, Hashable {
    /// The failure will not pass by retrying (bad credentials, invalid
    /// parameters, a missing resource, a malformed request).
    case doNotRetry
    /// A failure that may pass: a connection error, HTTP 500/502/503/504,
    /// a truncated response.
    case transient
    /// The connect or request timeout passed. Costs more than a transient retry.
    case timeout
    /// The service throttled the call (HTTP 429, `TooManyRequestsException`,
    /// the SDKs' throttling codes).
    case throttling
}
