#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Federation
import InMemoryLogging
import Logging
import Synchronization
import XCTest

final class RetryRunnerTests: XCTestCase {
    private let transient = RetryTestError(disposition: .transient)

    // MARK: Attempts

    func testTransientFailuresAreRetriedUntilSuccess() async throws {
        let harness = RetryHarness()
        let result = try await harness.run(harness.runner(), failures: [transient, transient])
        XCTAssertEqual(result, 3)
        XCTAssertEqual(harness.attempts, [1, 2, 3])
        XCTAssertEqual(harness.sleeps, [.milliseconds(500), .seconds(1)])
    }

    func testStopsAfterMaxAttemptsAndRethrowsTheLastErrorUnchanged() async {
        let harness = RetryHarness()
        let error = await harness.runFailing(harness.runner(), with: transient)
        XCTAssertEqual(harness.attempts, [1, 2, 3])
        XCTAssertEqual(harness.sleeps.count, 2)
        var expected = transient
        expected.tag = 3
        XCTAssertEqual(error as? RetryTestError, expected)
    }

    func testMaxAttemptsIsConfigurable() async {
        let harness = RetryHarness()
        _ = await harness.runFailing(harness.runner(policy: RetryPolicy(maxAttempts: 6)), with: transient)
        XCTAssertEqual(harness.attempts, [1, 2, 3, 4, 5, 6])
    }

    func testNonePolicyMakesOneAttempt() async {
        let harness = RetryHarness()
        let error = await harness.runFailing(harness.runner(policy: RetryPolicy.none), with: transient)
        XCTAssertEqual(harness.attempts, [1])
        XCTAssertEqual(harness.sleeps, [])
        XCTAssertEqual((error as? RetryTestError)?.tag, 1)
    }

    func testMaxAttemptsBelowOneCountsAsOne() async {
        let harness = RetryHarness()
        _ = await harness.runFailing(harness.runner(policy: RetryPolicy(maxAttempts: 0)), with: transient)
        XCTAssertEqual(harness.attempts, [1])
    }

    func testDoNotRetryMakesExactlyOneAttempt() async {
        let harness = RetryHarness()
        let quota = RetryQuota()
        let error = await harness.runFailing(
            harness.runner(policy: RetryPolicy(maxAttempts: 10), quota: quota),
            with: RetryTestError(disposition: .doNotRetry)
        )
        XCTAssertEqual(harness.attempts, [1])
        XCTAssertEqual(harness.sleeps, [])
        XCTAssertEqual((error as? RetryTestError)?.disposition, .doNotRetry)
        XCTAssertEqual(quota.availableTokens, 500)
    }

    func testUnclassifiedErrorIsNotRetried() async {
        struct Other: Error {}
        let harness = RetryHarness()
        do {
            _ = try await harness.runner().run(
                operation: { attempt -> Int in
                    harness.recordAttempt(attempt)
                    throw Other()
                },
                classify: { _ in (.doNotRetry, hint: nil) }
            )
            XCTFail("expected an error")
        } catch {
            XCTAssertTrue(error is Other)
        }
        XCTAssertEqual(harness.attempts, [1])
    }

    func testThrottlingIsRetried() async throws {
        let harness = RetryHarness()
        let quota = RetryQuota()
        let throttled = RetryTestError(disposition: .throttling)
        let result = try await harness.run(harness.runner(quota: quota), failures: [throttled, throttled])
        XCTAssertEqual(result, 3)
        XCTAssertEqual(harness.sleeps, [.milliseconds(500), .seconds(1)])
        // Two retries at 5 tokens each; the success refunds the last one.
        XCTAssertEqual(quota.availableTokens, 495)
    }

    func testTimeoutIsRetried() async throws {
        let harness = RetryHarness()
        let result = try await harness.run(harness.runner(), failures: [RetryTestError(disposition: .timeout)])
        XCTAssertEqual(result, 2)
        XCTAssertEqual(harness.sleeps, [.milliseconds(500)])
    }

    // MARK: Backoff

    func testBackoffSequenceWithHalfRandom() async {
        let harness = RetryHarness()
        _ = await harness.runFailing(harness.runner(policy: RetryPolicy(maxAttempts: 5), random: 0.5), with: transient)
        XCTAssertEqual(harness.sleeps, [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4)])
    }

    func testBackoffSequenceWithFullRandom() async {
        let harness = RetryHarness()
        _ = await harness.runFailing(harness.runner(policy: RetryPolicy(maxAttempts: 5), random: 1.0), with: transient)
        XCTAssertEqual(harness.sleeps, [.seconds(1), .seconds(2), .seconds(4), .seconds(8)])
    }

    func testBackoffSequenceWithRandomJustBelowOne() async {
        let harness = RetryHarness()
        let random = 1.0.nextDown
        _ = await harness.runFailing(harness.runner(policy: RetryPolicy(maxAttempts: 4), random: random), with: transient)
        let expected: [Double] = [1, 2, 4]
        XCTAssertEqual(harness.sleeps.count, expected.count)
        for (slept, seconds) in zip(harness.sleeps, expected) {
            XCTAssertLessThan(slept, .seconds(seconds))
            XCTAssertGreaterThan(slept, .seconds(seconds) - .microseconds(1))
        }
    }

    func testZeroRandomGivesZeroBackoff() async {
        let harness = RetryHarness()
        _ = await harness.runFailing(harness.runner(random: 0), with: transient)
        XCTAssertEqual(harness.sleeps, [.zero, .zero])
    }

    func testBackoffIsCappedAtMaxBackoff() async {
        let harness = RetryHarness()
        _ = await harness.runFailing(harness.runner(policy: RetryPolicy(maxAttempts: 8), random: 1.0), with: transient)
        XCTAssertEqual(
            harness.sleeps,
            [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(20), .seconds(20)]
        )
    }

    func testCustomMaxBackoff() async {
        let harness = RetryHarness()
        let policy = RetryPolicy(maxAttempts: 5, maxBackoff: .seconds(3))
        _ = await harness.runFailing(harness.runner(policy: policy, random: 1.0), with: transient)
        XCTAssertEqual(harness.sleeps, [.seconds(1), .seconds(2), .seconds(3), .seconds(3)])
    }

    func testBackoffDoesNotOverflowForLargeAttemptNumbers() {
        let runner = RetryHarness().runner(random: 1.0)
        XCTAssertEqual(runner.delay(afterAttempt: 10_000, hint: nil), .seconds(20))
        XCTAssertEqual(runner.delay(afterAttempt: Int.max, hint: nil), .seconds(20))
    }

    func testRandomOutsideUnitRangeIsClamped() {
        XCTAssertEqual(RetryHarness().runner(random: 7).delay(afterAttempt: 1, hint: nil), .seconds(1))
        XCTAssertEqual(RetryHarness().runner(random: -3).delay(afterAttempt: 1, hint: nil), .zero)
        XCTAssertEqual(RetryHarness().runner(random: .nan).delay(afterAttempt: 1, hint: nil), .zero)
    }

    // MARK: Server hints

    func testHintLongerThanBackoffIsHonoured() async throws {
        let harness = RetryHarness()
        let hinted = RetryTestError(disposition: .throttling, hint: .seconds(3))
        _ = try await harness.run(harness.runner(), failures: [hinted])
        XCTAssertEqual(harness.sleeps, [.seconds(3)])
    }

    func testHintIsCutToRetryAfterCap() async throws {
        let harness = RetryHarness()
        let hinted = RetryTestError(disposition: .throttling, hint: .seconds(3_600))
        _ = try await harness.run(harness.runner(), failures: [hinted])
        XCTAssertEqual(harness.sleeps, [.seconds(20)])

        let capped = RetryHarness()
        _ = try await capped.run(capped.runner(policy: RetryPolicy(retryAfterCap: .seconds(5))), failures: [hinted])
        XCTAssertEqual(capped.sleeps, [.seconds(5)])
    }

    func testHintShorterThanBackoffKeepsBackoff() async throws {
        let harness = RetryHarness()
        let hinted = RetryTestError(disposition: .transient, hint: .milliseconds(100))
        _ = try await harness.run(harness.runner(), failures: [hinted, hinted])
        XCTAssertEqual(harness.sleeps, [.milliseconds(500), .seconds(1)])
    }

    func testNegativeHintIsIgnored() {
        let runner = RetryHarness().runner()
        XCTAssertEqual(runner.delay(afterAttempt: 1, hint: .seconds(-5)), .milliseconds(500))
    }

    func testHintsParsedFromHeadersAreHonouredWithinTheCap() async throws {
        let now = Date(timeIntervalSince1970: 784_111_777)
        let amz = RetryRunner.retryAfterHint(headers: [(name: "x-amz-retry-after", value: "2500")], now: now)
        let seconds = RetryRunner.retryAfterHint(headers: [(name: "Retry-After", value: "4")], now: now)
        let date = RetryRunner.retryAfterHint(
            headers: [(name: "Retry-After", value: "Sun, 06 Nov 1994 08:50:37 GMT")], now: now)
        let harness = RetryHarness()
        _ = try await harness.run(
            harness.runner(policy: RetryPolicy(maxAttempts: 4)),
            failures: [
                RetryTestError(disposition: .throttling, hint: amz),
                RetryTestError(disposition: .throttling, hint: seconds),
                RetryTestError(disposition: .throttling, hint: date),
            ]
        )
        XCTAssertEqual(harness.sleeps, [.milliseconds(2_500), .seconds(4), .seconds(20)])
    }

    // MARK: Cancellation

    func testCancellationErrorFromTheOperationIsNotRetried() async {
        let harness = RetryHarness()
        let classified = Mutex(0)
        do {
            _ = try await harness.runner(policy: RetryPolicy(maxAttempts: 5)).run(
                operation: { attempt -> Int in
                    harness.recordAttempt(attempt)
                    throw CancellationError()
                },
                classify: { _ in
                    classified.withLock { $0 += 1 }
                    return (.transient, hint: nil)
                }
            )
            XCTFail("expected CancellationError")
        } catch {
            XCTAssertTrue(error is CancellationError)
        }
        XCTAssertEqual(harness.attempts, [1])
        XCTAssertEqual(harness.sleeps, [])
        XCTAssertEqual(classified.withLock { $0 }, 0)
    }

    func testCancellationDuringSleepStopsAtOnce() async {
        let sleeper = SuspendingSleeper()
        let attempts = Mutex(0)
        let quota = RetryQuota()
        let runner = RetryRunner(
            policy: RetryPolicy(maxAttempts: 5),
            quota: quota,
            sleep: { try await sleeper.sleep($0) },
            random: { 0.5 }
        )
        let task = Task {
            try await runner.run(
                operation: { _ -> Int in
                    attempts.withLock { $0 += 1 }
                    throw RetryTestError(disposition: .transient)
                },
                classify: RetryTestError.classify
            )
        }
        var started = sleeper.started.makeAsyncIterator()
        _ = await started.next()
        task.cancel()
        do {
            _ = try await task.value
            XCTFail("expected CancellationError")
        } catch {
            XCTAssertTrue(error is CancellationError, "got \(type(of: error))")
        }
        XCTAssertEqual(attempts.withLock { $0 }, 1)
    }

    func testSleepThatIgnoresCancellationStillStops() async {
        let attempts = Mutex(0)
        let runner = RetryRunner(
            policy: RetryPolicy(maxAttempts: 5),
            quota: RetryQuota(),
            sleep: { _ in withUnsafeCurrentTask { $0?.cancel() } },
            random: { 0.5 }
        )
        do {
            _ = try await runner.run(
                operation: { _ -> Int in
                    attempts.withLock { $0 += 1 }
                    throw RetryTestError(disposition: .transient)
                },
                classify: RetryTestError.classify
            )
            XCTFail("expected CancellationError")
        } catch {
            XCTAssertTrue(error is CancellationError, "got \(type(of: error))")
        }
        XCTAssertEqual(attempts.withLock { $0 }, 1)
    }

    func testFailureAfterCancellationIsRethrownWithoutRetry() async {
        let harness = RetryHarness()
        let task = Task {
            await harness.runFailingAfterCancelling(harness.runner(policy: RetryPolicy(maxAttempts: 5)))
        }
        let error = await task.value
        XCTAssertEqual((error as? RetryTestError)?.tag, 1)
        XCTAssertEqual(harness.attempts, [1])
        XCTAssertEqual(harness.sleeps, [])
    }

    // MARK: Deadline

    func testDeadlineStopsARetryWhoseWaitWouldPassIt() async {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test", factory: { _ in handler })
        logger.logLevel = .debug
        let harness = RetryHarness()
        let quota = RetryQuota()
        let error = await harness.runFailing(
            harness.runner(policy: RetryPolicy(maxAttempts: 5), quota: quota),
            deadline: harness.start + .seconds(1),
            logger: logger,
            with: transient
        )
        // Waits 0.5 s, then a 1 s wait would end at 1.5 s, past the deadline.
        XCTAssertEqual(harness.attempts, [1, 2])
        XCTAssertEqual(harness.sleeps, [.milliseconds(500)])
        XCTAssertEqual((error as? RetryTestError)?.tag, 2)
        // The refused retry took no tokens.
        XCTAssertEqual(quota.availableTokens, 495)
        // Whoever reads the debug log learns why the call stopped early.
        XCTAssertEqual(handler.entries.map(\.message), ["Retrying after a failed attempt", "Not retrying: the wait would pass the call's deadline"])
        XCTAssertEqual(handler.entries.last?.metadata["broker.attempt"], "3")
        XCTAssertEqual(handler.entries.last?.metadata["broker.delay"], "\(Duration.seconds(1))")
    }

    func testDeadlineAllowsRetriesThatFit() async throws {
        let harness = RetryHarness()
        let result = try await harness.run(
            harness.runner(),
            deadline: harness.start + .seconds(2),
            failures: [transient, transient]
        )
        XCTAssertEqual(result, 3)
        XCTAssertEqual(harness.sleeps, [.milliseconds(500), .seconds(1)])
    }

    func testDeadlineAlsoBoundsServerHints() async {
        let harness = RetryHarness()
        _ = await harness.runFailing(
            harness.runner(),
            deadline: harness.start + .seconds(10),
            with: RetryTestError(disposition: .throttling, hint: .seconds(15))
        )
        XCTAssertEqual(harness.attempts, [1])
        XCTAssertEqual(harness.sleeps, [])
    }

    // MARK: Logging

    func testLogsOneDebugLinePerRetryWithoutErrorMessages() async throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test", factory: { _ in handler })
        logger.logLevel = .debug
        let harness = RetryHarness()
        _ = try await harness.runner().run(
            logger: logger,
            operation: { attempt -> Int in
                if attempt < 3 { throw RetryTestError(disposition: .transient) }
                return attempt
            },
            classify: RetryTestError.classify
        )
        let entries = handler.entries
        XCTAssertEqual(entries.count, 2)
        XCTAssertEqual(entries.map(\.level), [.debug, .debug])
        XCTAssertEqual(entries.map(\.message), ["Retrying after a failed attempt", "Retrying after a failed attempt"])
        XCTAssertEqual(entries.map { $0.metadata["broker.attempt"] }, ["2", "3"])
        XCTAssertEqual(entries.map { $0.metadata["broker.delay"] }, ["\(Duration.milliseconds(500))", "\(Duration.seconds(1))"])
        XCTAssertEqual(entries.first?.metadata["broker.disposition"], "transient")
        for entry in entries {
            XCTAssertNil(entry.error)
            XCTAssertFalse("\(entry.message) \(entry.metadata)".contains("SECRET"))
        }
    }

    func testLogsWhenTheQuotaRefusesARetry() async {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test", factory: { _ in handler })
        logger.logLevel = .debug
        let quota = RetryQuota(policy: RetryPolicy(initialRetryTokens: 0))
        do {
            _ = try await RetryHarness().runner(quota: quota).run(
                logger: logger,
                operation: { _ -> Int in throw RetryTestError(disposition: .transient) },
                classify: RetryTestError.classify
            )
        } catch {}
        XCTAssertEqual(handler.entries.map(\.message), ["Not retrying: the retry quota is exhausted"])
        XCTAssertFalse("\(handler.entries)".contains("SECRET"))
    }
}
