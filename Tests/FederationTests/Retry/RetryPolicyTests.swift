import Federation
import XCTest

final class RetryPolicyTests: XCTestCase {
    func testStandardDefaults() {
        let policy = RetryPolicy.standard
        XCTAssertEqual(policy.maxAttempts, 3)
        XCTAssertEqual(policy.maxBackoff, .seconds(20))
        XCTAssertEqual(policy.retryAfterCap, .seconds(20))
        XCTAssertEqual(policy.initialRetryTokens, 500)
        XCTAssertEqual(policy.retryCost, 5)
        XCTAssertEqual(policy.timeoutRetryCost, 10)
        XCTAssertEqual(policy.noRetryIncrement, 1)
        XCTAssertEqual(policy, RetryPolicy())
    }

    func testNoneMakesOneAttempt() {
        XCTAssertEqual(RetryPolicy.none.maxAttempts, 1)
        XCTAssertNotEqual(RetryPolicy.none, RetryPolicy.standard)
        XCTAssertEqual(Set([RetryPolicy.none, .standard, RetryPolicy()]).count, 2)
    }

    func testQuotaTakesItsSettingsFromThePolicy() {
        let quota = RetryQuota(policy: RetryPolicy(initialRetryTokens: 50, retryCost: 2, timeoutRetryCost: 7, noRetryIncrement: 3))
        XCTAssertEqual(quota.capacity, 50)
        XCTAssertEqual(quota.acquire(for: .transient), 2)
        XCTAssertEqual(quota.acquire(for: .timeout), 7)
        quota.release(success: nil)
        XCTAssertEqual(quota.availableTokens, 44)
    }
}
