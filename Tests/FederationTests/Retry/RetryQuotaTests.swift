import Federation
import XCTest

final class RetryQuotaTests: XCTestCase {
    func testCostsFollowTheDisposition() {
        let quota = RetryQuota()
        XCTAssertEqual(quota.capacity, 500)
        XCTAssertEqual(quota.acquire(for: .transient), 5)
        XCTAssertEqual(quota.acquire(for: .throttling), 5)
        XCTAssertEqual(quota.acquire(for: .timeout), 10)
        XCTAssertNil(quota.acquire(for: .doNotRetry))
        XCTAssertEqual(quota.availableTokens, 480)
    }

    func testRefusesWhenTooFewTokensAreLeftAndTakesNothing() {
        let quota = RetryQuota(policy: RetryPolicy(initialRetryTokens: 12))
        XCTAssertEqual(quota.acquire(for: .timeout), 10)
        XCTAssertNil(quota.acquire(for: .transient))
        XCTAssertEqual(quota.availableTokens, 2)
    }

    func testSuccessRefundsTheRetryCostUpToCapacity() {
        let quota = RetryQuota()
        let cost = quota.acquire(for: .timeout)
        XCTAssertEqual(quota.availableTokens, 490)
        quota.release(success: cost)
        XCTAssertEqual(quota.availableTokens, 500)
        quota.release(success: 10)
        XCTAssertEqual(quota.availableTokens, 500, "never beyond the initial capacity")
    }

    func testFirstAttemptSuccessRefundsOneToken() {
        let quota = RetryQuota()
        _ = quota.acquire(for: .transient)
        _ = quota.acquire(for: .transient)
        quota.release(success: nil)
        XCTAssertEqual(quota.availableTokens, 491)
        quota.release(success: nil)
        XCTAssertEqual(quota.availableTokens, 492)
    }

    func testReleaseSaturates() {
        let quota = RetryQuota()
        quota.release(success: .max)
        XCTAssertEqual(quota.availableTokens, 500)
    }

    func testDrainingTheBucketStopsRetries() async {
        let harness = RetryHarness()
        let quota = RetryQuota()
        let error = await harness.runFailing(
            harness.runner(policy: RetryPolicy(maxAttempts: 1_000), quota: quota),
            with: RetryTestError(disposition: .transient)
        )
        // 500 tokens pay for exactly 100 retries at 5 each.
        XCTAssertEqual(harness.attempts.count, 101)
        XCTAssertEqual(harness.sleeps.count, 100)
        XCTAssertEqual(quota.availableTokens, 0)
        XCTAssertEqual((error as? RetryTestError)?.tag, 101)
    }

    func testTimeoutRetriesCostTen() async {
        let harness = RetryHarness()
        let quota = RetryQuota()
        _ = await harness.runFailing(
            harness.runner(policy: RetryPolicy(maxAttempts: 1_000), quota: quota),
            with: RetryTestError(disposition: .timeout)
        )
        XCTAssertEqual(harness.attempts.count, 51)
        XCTAssertEqual(quota.availableTokens, 0)
    }

    func testAnEmptyBucketAllowsNoRetryButTheFirstAttemptStillRuns() async throws {
        let quota = RetryQuota()
        while quota.acquire(for: .transient) != nil {}
        let harness = RetryHarness()
        let error = await harness.runFailing(harness.runner(quota: quota), with: RetryTestError(disposition: .transient))
        XCTAssertEqual(harness.attempts, [1])
        XCTAssertEqual((error as? RetryTestError)?.tag, 1)

        // A success puts a token back; it takes five for a retry again.
        let succeeding = RetryHarness()
        for _ in 0..<5 { _ = try await succeeding.run(succeeding.runner(quota: quota), failures: []) }
        XCTAssertEqual(quota.availableTokens, 5)
        let retried = RetryHarness()
        _ = try await retried.run(retried.runner(quota: quota), failures: [RetryTestError(disposition: .transient)])
        XCTAssertEqual(retried.attempts, [1, 2])
    }

    func testRunnerRefundsTheCostOfTheRetryThatSucceeded() async throws {
        let harness = RetryHarness()
        let quota = RetryQuota()
        _ = try await harness.run(
            harness.runner(quota: quota),
            failures: [RetryTestError(disposition: .timeout), RetryTestError(disposition: .transient)]
        )
        // Took 10 + 5; the success refunds the 5 of the retry that succeeded.
        XCTAssertEqual(quota.availableTokens, 490)
        let again = RetryHarness()
        _ = try await again.run(again.runner(quota: quota), failures: [])
        XCTAssertEqual(quota.availableTokens, 491)
    }

    func testFinalFailureRefundsNothing() async {
        let harness = RetryHarness()
        let quota = RetryQuota()
        _ = await harness.runFailing(harness.runner(quota: quota), with: RetryTestError(disposition: .transient))
        XCTAssertEqual(quota.availableTokens, 490)
    }

    func testOneQuotaIsSharedAcrossRunners() async {
        let quota = RetryQuota()
        let first = RetryHarness()
        let second = RetryHarness()
        let policy = RetryPolicy(maxAttempts: 1_000)
        _ = await first.runFailing(first.runner(policy: policy, quota: quota), with: RetryTestError(disposition: .timeout))
        XCTAssertEqual(first.attempts.count, 51)
        _ = await second.runFailing(second.runner(policy: policy, quota: quota), with: RetryTestError(disposition: .transient))
        XCTAssertEqual(second.attempts, [1])
    }

    func testConcurrentAcquisitionsNeverOverdraw() async {
        let quota = RetryQuota()
        let granted = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<400 {
                group.addTask { quota.acquire(for: .transient) == nil ? 0 : 1 }
            }
            return await group.reduce(0, +)
        }
        XCTAssertEqual(granted, 100)
        XCTAssertEqual(quota.availableTokens, 0)
    }
}
