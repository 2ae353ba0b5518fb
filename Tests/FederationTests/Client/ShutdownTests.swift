import BrokerTestSupport
@testable import Federation
import FederationLifecycle
import Foundation
import ServiceLifecycle
import ServiceLifecycleTestKit
import XCTest

/// Graceful shutdown: in-flight federations finish (or are cancelled at the deadline),
/// nothing new starts, timers and streams stop.
final class ShutdownTests: XCTestCase {
    func testAFederationInFlightFinishesAndCommitsWithinTheGracePeriod() async throws {
        let harness = try Harness()
        harness.fake.responseDelay = .milliseconds(300)
        let client = harness.client
        let federation = Task { try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice") }
        try await Task.sleep(for: .milliseconds(50))
        await client.shutdown(gracePeriod: .seconds(5))
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
        try await Task.sleep(for: .milliseconds(50))
        let start = ContinuousClock.now
        await client.shutdown(gracePeriod: .milliseconds(200))
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(10), "shutdown did not wait for the 30 s answer")
        await assertThrows(FederationError.self, code: .cancelled) { try await federation.value }
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.credentials, first.credentials, "the previous session is intact")
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
}
