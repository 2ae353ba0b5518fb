import Synchronization

/// The retry quota of the AWS SDKs' standard retry mode: a token bucket one
/// client shares across all of its calls.
///
/// Each retry takes tokens (``RetryPolicy/retryCost`` or, after a timeout,
/// ``RetryPolicy/timeoutRetryCost``); when too few are left the call is not
/// retried. A successful call puts back the cost of the retry that succeeded,
/// or ``RetryPolicy/noRetryIncrement`` when it succeeded at the first attempt,
/// never beyond ``RetryPolicy/initialRetryTokens``. A call that fails for good
/// puts nothing back, so a long outage drains the bucket and retries stop until
/// calls succeed again.
package final class RetryQuota: Sendable {
    /// The size of the bucket, which starts full.
    package let capacity: UInt
    /// Tokens a retry after a transient error or throttling takes.
    package let retryCost: UInt
    /// Tokens a retry after a timeout takes.
    package let timeoutRetryCost: UInt
    /// Tokens a call whose first attempt succeeded puts back.
    package let noRetryIncrement: UInt

    private let tokens: Mutex<UInt>

    /// Creates a full bucket with the quota settings of `policy`.
    package init(policy: RetryPolicy = .standard) {
        self.capacity = policy.initialRetryTokens
        self.retryCost = policy.retryCost
        self.timeoutRetryCost = policy.timeoutRetryCost
        self.noRetryIncrement = policy.noRetryIncrement
        self.tokens = Mutex(policy.initialRetryTokens)
    }

    /// The tokens left in the bucket.
    package var availableTokens: UInt {
        tokens.withLock { $0 }
    }

    /// Takes the tokens a retry after a failure of kind `disposition` costs.
    ///
    /// - Returns: The cost taken, to hand back to ``release(success:)`` if the
    ///   call then succeeds; `nil` when the failure must not be retried
    ///   (``RetryDisposition/doNotRetry``) or the bucket holds too few tokens,
    ///   in which case nothing is taken.
    package func acquire(for disposition: RetryDisposition) -> UInt? {
        let cost: UInt
        switch disposition {
        case .doNotRetry: return nil
        case .transient, .throttling: cost = retryCost
        case .timeout: cost = timeoutRetryCost
        }
        return tokens.withLock { available -> UInt? in
            guard available >= cost else { return nil }
            available -= cost
            return cost
        }
    }

    /// Puts tokens back after a call succeeded.
    ///
    /// - Parameter retryCost: The cost ``acquire(for:)`` returned for the retry
    ///   that succeeded, or `nil` when the first attempt succeeded (which puts
    ///   back ``noRetryIncrement``). The bucket never grows past ``capacity``.
    package func release(success retryCost: UInt?) {
        let refund = retryCost ?? noRetryIncrement
        tokens.withLock { available in
            let (sum, overflow) = available.addingReportingOverflow(refund)
            available = overflow ? capacity : min(sum, capacity)
        }
    }
}
