@testable import Federation
import Synchronization
import XCTest

/// ``CancellationSignal``: handlers run once, late ones at once, finished operations are
/// forgotten, and ``CancellationSignal/interruptible(_:)`` ends a wait without cancelling
/// the caller's task.
final class CancellationSignalTests: XCTestCase {
    func testFiringRunsEachWaitingHandlerOnce() async {
        let signal = CancellationSignal()
        let calls = Mutex(0)
        let (started, startedContinuation) = AsyncStream<Void>.makeStream()
        let (release, releaseContinuation) = AsyncStream<Void>.makeStream()
        let operation = Task {
            await signal.withHandler(onFire: { calls.withLock { $0 += 1 } }) {
                startedContinuation.yield()
                for await _ in release { break }
            }
        }
        for await _ in started { break }
        XCTAssertFalse(signal.isFired)
        signal.fire()
        signal.fire()
        XCTAssertTrue(signal.isFired)
        XCTAssertEqual(calls.withLock { $0 }, 1, "the handler ran \(calls.withLock { $0 }) times")
        releaseContinuation.yield()
        await operation.value
        XCTAssertEqual(calls.withLock { $0 }, 1)
    }

    func testAHandlerRegisteredAfterFiringRunsAtOnce() async {
        let signal = CancellationSignal()
        signal.fire()
        let calls = Mutex(0)
        let value = await signal.withHandler(onFire: { calls.withLock { $0 += 1 } }) { () -> Int in
            XCTAssertEqual(calls.withLock { $0 }, 1, "the handler had not run before the operation")
            return 7
        }
        XCTAssertEqual(value, 7)
        XCTAssertEqual(calls.withLock { $0 }, 1)
    }

    func testAFinishedOperationsHandlerDoesNotRunWhenTheSignalFiresLater() async {
        let signal = CancellationSignal()
        let calls = Mutex(0)
        for _ in 0..<3 {
            await signal.withHandler(onFire: { calls.withLock { $0 += 1 } }) {}
        }
        signal.fire()
        XCTAssertEqual(calls.withLock { $0 }, 0)
    }

    func testInterruptibleEndsASleepWithoutCancellingTheCaller() async throws {
        let signal = CancellationSignal()
        let clock = ContinuousClock()
        let start = clock.now
        let waiter = Task { () -> (error: (any Error)?, taskCancelled: Bool) in
            do {
                try await signal.interruptible { try await Task.sleep(for: .seconds(30)) }
                return (nil, Task.isCancelled)
            } catch {
                return (error, Task.isCancelled)
            }
        }
        try await Task.sleep(for: .milliseconds(50))
        signal.fire()
        let outcome = await waiter.value
        XCTAssertLessThan(start.duration(to: clock.now), .seconds(10))
        XCTAssertTrue(outcome.error is CancellationError, "got \(String(describing: outcome.error))")
        XCTAssertFalse(outcome.taskCancelled, "the signal cancelled the caller's task")
    }

    func testInterruptibleFollowsTheCallersCancellationAndReturnsValues() async throws {
        let signal = CancellationSignal()
        let value = try await signal.interruptible { 42 }
        XCTAssertEqual(value, 42)
        let waiter = Task { try await signal.interruptible { try await Task.sleep(for: .seconds(30)) } }
        try await Task.sleep(for: .milliseconds(50))
        waiter.cancel()
        let result = await waiter.result
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "got \($0)") }
        XCTAssertFalse(signal.isFired)
    }
}
