import BrokerTestSupport
@testable import Federation
import FederationLifecycle
import Foundation
import SecureStorage
import ServiceLifecycle
import ServiceLifecycleTestKit
import XCTest

/// Graceful shutdown: in-flight federations finish (or are cancelled at the deadline),
/// nothing new starts, timers and streams stop.
final class ShutdownTests: XCTestCase {
    func testAFederationInFlightFinishesAndCommitsWithinTheGracePeriod() async throws {
        let keystore = InMemoryKeystore()
        let harness = try Harness(keystore: keystore)
        harness.fake.responseDelay = .milliseconds(300)
        let client = harness.client
        let federation = Task { try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice") }
        let fake = harness.fake
        let inFlight = await eventually { fake.count(.getId) == 1 }
        XCTAssertTrue(inFlight, "the federation never sent its first request")
        await client.shutdown(gracePeriod: .seconds(5))
        // Read in the store as soon as shutdown returned, before the federation's caller is
        // awaited: the caller may close the keystore once shutdown returns.
        let committed = try await keystore.value(forKey: "session.alice")
        XCTAssertNotNil(committed, "shutdown returned before the federation in flight had committed")
        let result = try await federation.value
        let stored = try await client.credentials(for: "alice")
        XCTAssertEqual(stored, result.credentials, "the federation finished and committed before shutdown returned")
        let shuttingDown = await client.isShuttingDown
        XCTAssertTrue(shuttingDown)
        await assertThrows(FederationError.self, code: .cancelled) {
            try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        }
        XCTAssertEqual(harness.fake.count(.getId), 1, "nothing new was sent after shutdown")
    }

    func testFederationsPastTheGracePeriodAreCancelledAndLeaveTheSessionAsItWas() async throws {
        let harness = try Harness()
        let client = harness.client
        let first = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.fake.responseDelay = .seconds(30)
        let federation = Task { try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice") }
        let fake = harness.fake
        let inFlight = await eventually { fake.count(.getCredentialsForIdentity) == 2 }
        XCTAssertTrue(inFlight, "the second federation never sent its request")
        let start = ContinuousClock.now
        await client.shutdown(gracePeriod: .milliseconds(200))
        let took = ContinuousClock.now - start
        XCTAssertLessThan(took, .seconds(10), "shutdown did not wait for the 30 s answer")
        // (Load can only lengthen it.)
        XCTAssertGreaterThanOrEqual(took, .milliseconds(200), "shutdown returned before the grace period the federation in flight had")
        await assertThrows(FederationError.self, code: .cancelled) { try await federation.value }
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.credentials, first.credentials, "the previous session is intact")
    }

    /// The federation runs in the caller's task, and shutdown cuts it with a signal, not by
    /// cancelling that task: over the real libcurl transport, the transfer in flight ends at
    /// the deadline and the caller's task is not cancelled.
    func testCancellingAtTheDeadlineLeavesTheCallersTaskUncancelled() async throws {
        let fake = try FakeCognito.served()
        let client = try FederationClient(configuration: .init(identityPoolId: testPoolId, endpoint: fake.endpoint))
        let first = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        fake.responseDelay = .seconds(30)
        let federation = federationReportingItsTask(client, session: "alice")
        let inFlight = await eventually { fake.count(.getCredentialsForIdentity) == 2 }
        XCTAssertTrue(inFlight)
        await assertShutdownCancels(federation, of: client, without: "the 30 s answer")
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.credentials, first.credentials, "the previous session is intact")
    }

    /// A federation waiting out a retry backoff at the deadline stops waiting: shutdown does
    /// not last as long as the backoff.
    func testAFederationWaitingToRetryIsCancelledAtTheDeadline() async throws {
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        // Retry-After makes the wait before the second attempt 30 s.
        fake.setDefault(
            .error("InternalErrorException", message: "try again", status: 500, headers: FakeCognito.jsonHeaders + [("Retry-After", "30")]),
            for: .getId)
        let policy = RetryPolicy(maxAttempts: 3, maxBackoff: .seconds(30), retryAfterCap: .seconds(30))
        let client = try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
            transport: fake.transport,
            keystore: InMemoryKeystore(),
            environment: [:],
            retryRunner: RetryRunner(policy: policy, quota: RetryQuota(policy: policy), random: { 1 }),
            now: TestClock().function,
            logger: nil
        )
        let federation = federationReportingItsTask(client, session: "alice")
        let inFlight = await eventually { fake.count(.getId) == 1 }
        XCTAssertTrue(inFlight)
        await assertShutdownCancels(federation, of: client, without: "the 30 s backoff")
        XCTAssertEqual(fake.count(.getId), 1, "a retry was sent after the deadline")
        let state = try await client.session("alice").state
        XCTAssertEqual(state, .notFederated)
    }

    /// An answer that arrives after the deadline is not committed: the federation fails as
    /// cancelled and the session keeps what it held.
    func testAnAnswerArrivingAfterTheDeadlineIsNotCommitted() async throws {
        let harness = try Harness()
        let client = harness.client
        let first = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let signal = client.shutdownSignal
        let identityId = first.identityId
        harness.fake.enqueue(for: .getCredentialsForIdentity) { _ in
            // The deadline passes while this answer is on its way back.
            signal.fire()
            return .credentials(identityId: identityId, accessKeyId: "ASIALATEANSWER000001", expiration: testEpoch.addingTimeInterval(7200))
        }
        await assertThrows(FederationError.self, code: .cancelled) {
            try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.credentials, first.credentials, "the late answer was committed")
        XCTAssertEqual(snapshot.state, .federated)
    }

    /// The same for an answer that says the identity is gone: the session is not marked
    /// terminated after the deadline.
    func testAnIdentityGoneAnswerArrivingAfterTheDeadlineIsNotCommitted() async throws {
        let harness = try Harness()
        let client = harness.client
        let first = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let signal = client.shutdownSignal
        harness.fake.enqueue(for: .getCredentialsForIdentity) { _ in
            signal.fire()
            return .error("ResourceNotFoundException", message: "Identity '\(first.identityId)' not found.")
        }
        await assertThrows(FederationError.self, code: .cancelled) {
            try await client.federate(
                token: "opaque-dev-token", provider: .developer,
                options: FederationOptions(developerProvidedIdentityId: first.identityId), session: "alice")
        }
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.state, .federated, "the late answer was committed")
        XCTAssertEqual(snapshot.credentials, first.credentials)
    }

    /// A clear under way when shutdown ends the streams is let finish first: observers are
    /// told the session is gone rather than left with the state before it.
    func testAClearUnderWayAtShutdownReachesObserversBeforeTheStreamsEnd() async throws {
        let spy = ScriptableKeystore(wrapping: InMemoryKeystore())
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        let client = try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
            transport: fake.transport, keystore: spy, environment: [:], retryRunner: noSleepRunner(),
            now: { testEpoch }, logger: nil)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let states = await client.stateUpdates(for: "alice")
        let gate = spy.holdNextCommit()
        let clearing = Task { try await client.clear(session: "alice") }
        let held = await gate.arrived()
        XCTAssertTrue(held)
        let shuttingDown = Task { await client.shutdown(gracePeriod: .seconds(10)) }
        try await Task.sleep(for: .milliseconds(100))
        gate.release()
        try await clearing.value
        await shuttingDown.value
        var seen: [SessionState] = []
        for await state in states { seen.append(state) }
        XCTAssertEqual(seen, [.federated, .notFederated], "the stream ended before the clear it was under way for")
    }

    /// ...for the grace period at most: a clear whose keystore does not answer does not hold
    /// shutdown.
    func testAClearThatDoesNotEndHoldsShutdownNoLongerThanTheGracePeriod() async throws {
        let spy = ScriptableKeystore(wrapping: InMemoryKeystore())
        let client = FederationClient(keystore: spy)
        let gate = spy.holdNextCommit()
        let clearing = Task { try await client.clear(session: "alice") }
        let held = await gate.arrived()
        XCTAssertTrue(held)
        let start = ContinuousClock.now
        let shuttingDown = Task { await client.shutdown(gracePeriod: .milliseconds(200)) }
        let ended = await eventually(timeout: .seconds(5)) { await client.hasShutDownForTesting }
        XCTAssertTrue(ended, "shutdown waited for a clear that does not end")
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(5))
        gate.release()
        try await clearing.value
        await shuttingDown.value
    }

    /// A client whose federation of "alice" has sent GetId and waits 30 s for the answer.
    private func federationWaitingForAnAnswer(
        file: StaticString = #filePath, line: UInt = #line
    ) async throws -> (Harness, Task<FederationResult, any Error>) {
        let harness = try Harness()
        harness.fake.responseDelay = .seconds(30)
        let client = harness.client
        let federation = Task { try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice") }
        let fake = harness.fake
        let inFlight = await eventually { fake.count(.getId) == 1 }
        XCTAssertTrue(inFlight, "the federation did not send GetId", file: file, line: line)
        return (harness, federation)
    }

    /// A call waiting for another call on the same session (a federation in flight) stops
    /// waiting when its task is cancelled, rather than when the other ends.
    func testACallWaitingForTheSessionsLockCanBeCancelled() async throws {
        let (harness, first) = try await federationWaitingForAnAnswer()
        let client = harness.client
        let waiting = Task { try await client.clear(session: "alice") }
        try await Task.sleep(for: .milliseconds(50))
        let start = ContinuousClock.now
        waiting.cancel()
        await assertThrows(FederationError.self, code: .cancelled) { try await waiting.value }
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(5), "the cancelled call waited for the federation")
        first.cancel()
        _ = await first.result
        // The lock is free again: nothing of the withdrawn waiter is left in the queue.
        harness.fake.responseDelay = .zero
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        try await client.clear(session: "alice")
    }

    /// The caller's own cancellation still ends its federation at once (it runs in the
    /// caller's task).
    func testCancellingTheCallersTaskCancelsItsFederation() async throws {
        let (harness, federation) = try await federationWaitingForAnAnswer()
        let client = harness.client
        let start = ContinuousClock.now
        federation.cancel()
        await assertThrows(FederationError.self, code: .cancelled) { try await federation.value }
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(10), "the federation waited for the 30 s answer")
        let state = try await client.session("alice").state
        XCTAssertEqual(state, .notFederated)
        harness.fake.responseDelay = .zero
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
    }

    /// Shuts `client` down with a 200 ms grace period and checks that `federation`, in flight,
    /// failed as cancelled at the deadline, without waiting for `what`, and that its task was
    /// not cancelled.
    private func assertShutdownCancels(
        _ federation: Task<(error: FederationError?, taskCancelled: Bool), Never>,
        of client: FederationClient,
        without what: String,
        file: StaticString = #filePath,
        line: UInt = #line
    ) async {
        let start = ContinuousClock.now
        await client.shutdown(gracePeriod: .milliseconds(200))
        let outcome = await federation.value
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(10), "shutdown waited for \(what)", file: file, line: line)
        XCTAssertEqual(outcome.error?.code, .cancelled, "got \(String(describing: outcome.error))", file: file, line: line)
        XCTAssertFalse(outcome.taskCancelled, "shutdown cancelled the caller's task", file: file, line: line)
    }

    /// Federates `session` in a task of its own that reports the error, if any, and whether
    /// that task was cancelled when the call returned.
    private func federationReportingItsTask(
        _ client: FederationClient, session: String
    ) -> Task<(error: FederationError?, taskCancelled: Bool), Never> {
        Task {
            do throws(FederationError) {
                try await client.federate(token: TestJWT.valid(), provider: .google, session: session)
                return (nil, Task.isCancelled)
            } catch {
                return (error, Task.isCancelled)
            }
        }
    }

    func testShutdownStopsTheTimerAndEndsStreams() async throws {
        let harness = try Harness()
        let updates = await harness.client.stateUpdates(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let timersBefore = await harness.client.timerCount
        XCTAssertEqual(timersBefore, 1)
        await harness.client.shutdown()
        let timersAfter = await harness.client.timerCount
        XCTAssertEqual(timersAfter, 0)
        var states: [SessionState] = []
        for await state in updates { states.append(state) }  // ends: the stream finished
        XCTAssertEqual(states, [.notFederated, .federating, .federated])
    }

    /// Streams asked for after shutdown (or while it ran) end after their first element,
    /// instead of waiting forever for a client that will never publish.
    func testStreamsMadeAfterShutdownEnd() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        await harness.client.shutdown()
        let states = await harness.client.stateUpdates(for: "alice")
        let events = await harness.client.events(for: "alice")
        let all = await harness.client.allStateUpdates()
        let ended = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                var received: [SessionState] = []
                for await state in states { received.append(state) }
                for await _ in events {}
                for await _ in all {}
                return received == [.federated]
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(5))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        XCTAssertTrue(ended, "each stream yields the current state (if it has one) and ends")
    }

    /// As a swift-service-lifecycle service: graceful shutdown of the group shuts the client down.
    func testGracefulShutdownOfAServiceGroupShutsTheClientDown() async throws {
        let harness = try Harness()
        let client = harness.client
        try await testGracefulShutdown { trigger in
            let running = Task { try await client.run() }
            try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
            trigger.triggerGracefulShutdown()
            try await running.value
        }
        let shuttingDown = await client.isShuttingDown
        XCTAssertTrue(shuttingDown)
        await assertThrows(FederationError.self, code: .cancelled) {
            try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
    }

    /// The service's graceful shutdown gives a federation in flight its grace period: it
    /// finishes and commits before `run()` returns.
    func testAServicesGracefulShutdownLetsAFederationInFlightCommit() async throws {
        let keystore = InMemoryKeystore()
        let harness = try Harness(keystore: keystore)
        harness.fake.responseDelay = .milliseconds(300)
        let client = harness.client
        let fake = harness.fake
        try await testGracefulShutdown { trigger in
            let running = Task { try await client.run() }
            let federation = Task { try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice") }
            let inFlight = await eventually { fake.count(.getId) == 1 }
            XCTAssertTrue(inFlight, "the federation never sent its first request")
            trigger.triggerGracefulShutdown()
            try await running.value
            // Read as soon as run() returned: the caller may close the keystore then.
            let committed = try await keystore.value(forKey: "session.alice")
            XCTAssertNotNil(committed, "run() returned before the federation in flight had committed")
            let hasShutDown = await client.hasShutDownForTesting
            XCTAssertTrue(hasShutDown)
            let result = try await federation.value
            let stored = try await client.credentials(for: "alice")
            XCTAssertEqual(stored, result.credentials)
        }
    }

    /// A service group that cancels its services (past its graceful-shutdown time, or after
    /// another service failed) gives no grace period: the client's `run()` cancels the
    /// federation in flight at once instead of waiting out its own 10 seconds, which
    /// swift-service-lifecycle's `maximumCancellationDuration` would end with a crash.
    func testACancelledServiceShutsTheClientDownWithoutAGracePeriod() async throws {
        let harness = try Harness()
        let client = harness.client
        let first = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.fake.responseDelay = .seconds(30)
        let running = Task { try await client.run() }
        let federation = Task { try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice") }
        let fake = harness.fake
        let inFlight = await eventually { fake.count(.getCredentialsForIdentity) == 2 }
        XCTAssertTrue(inFlight)
        running.cancel()
        // Bounded so that a client waiting out its 10 s grace period fails the test.
        let returned = await eventually(timeout: .seconds(5)) { await client.hasShutDownForTesting }
        XCTAssertTrue(returned, "the cancelled service waited out its grace period")
        try await running.value
        await assertThrows(FederationError.self, code: .cancelled) { try await federation.value }
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.credentials, first.credentials, "the previous session is intact")
    }

    /// The usual escalation: graceful shutdown began (SIGTERM) with a federation in flight,
    /// and the group cancels its services when its own graceful-shutdown time is up. The
    /// client's grace period ends there, not 10 seconds later.
    func testAServiceCancelledDuringItsGracefulShutdownCutsTheGracePeriod() async throws {
        let harness = try Harness()
        let client = harness.client
        let first = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.fake.responseDelay = .seconds(30)
        try await testGracefulShutdown { trigger in
            let running = Task { try await client.run() }
            let federation = Task { try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice") }
            let fake = harness.fake
            let inFlight = await eventually { fake.count(.getCredentialsForIdentity) == 2 }
            XCTAssertTrue(inFlight)
            trigger.triggerGracefulShutdown()
            let shuttingDown = await eventually { await client.isShuttingDown }
            XCTAssertTrue(shuttingDown)
            running.cancel()
            // Bounded so that a client waiting out its 10 s grace period fails the test.
            let returned = await eventually(timeout: .seconds(5)) { await client.hasShutDownForTesting }
            XCTAssertTrue(returned, "the cancelled shutdown waited out its grace period")
            try await running.value
            await assertThrows(FederationError.self, code: .cancelled) { try await federation.value }
        }
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.credentials, first.credentials, "the previous session is intact")
    }
}

extension FederationClient {
    var hasShutDownForTesting: Bool { shutdownEnded }
}
