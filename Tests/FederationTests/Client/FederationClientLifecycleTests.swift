import BrokerTestSupport
@testable import Federation
import Foundation
import SecureStorage
import Synchronization
import XCTest

/// Timeouts, cancellation and the end of streams.
final class FederationClientLifecycleTests: XCTestCase {
    func testFederationTimeoutBoundsTheWholeExchangeAndKeepsThePreviousSession() async throws {
        let harness = try Harness(configure: { $0.federationTimeout = .milliseconds(50) })
        try await harness.client.federate(token: "EAAG-first", provider: .facebook, session: "alice")
        let before = try await harness.client.session("alice")
        harness.fake.resetRecording()
        // The cached-ID call answers 503 after the whole budget is gone: no retry fits.
        harness.fake.enqueue(FakeCognito.Reply.error(nil, status: 503).delayed(by: .milliseconds(120)), for: .getCredentialsForIdentity)
        await assertThrows(FederationError.self, code: .serviceUnavailable) {
            try await harness.client.federate(token: "EAAG-second", provider: .facebook, session: "alice")
        }
        XCTAssertEqual(harness.fake.calls.count, 1, "no retry past the federation deadline")
        let after = try await harness.client.session("alice")
        XCTAssertEqual(after, before)
    }

    func testAnAttemptStartingPastTheDeadlineTimesOut() async throws {
        let harness = try Harness(configure: { $0.federationTimeout = .milliseconds(50) })
        harness.fake.enqueue(FakeCognito.Reply.identityId("us-east-1:slow").delayed(by: .milliseconds(120)), for: .getId)
        let error = await assertThrows(FederationError.self, code: .timedOut) { try await harness.client.federate(token: "EAAG", provider: .facebook) }
        XCTAssertEqual(error?.operation, "GetCredentialsForIdentity")
        XCTAssertEqual(harness.fake.operations, ["GetId"], "GetCredentialsForIdentity is not sent once the deadline passed")
        let snapshot = try await harness.client.session()
        XCTAssertEqual(snapshot.state, .notFederated)
    }

    func testCancellationEndsTheFederationWithCancelledAndRestoresTheState() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: "EAAG-first", provider: .facebook, session: "alice")
        let before = try await harness.client.session("alice")
        harness.fake.responseDelay = .seconds(30)
        let client = harness.client
        let task = Task { try await client.federate(token: "EAAG-second", provider: .facebook, session: "alice") }
        let sent = await eventually { harness.fake.calls.count == 3 }
        XCTAssertTrue(sent)
        task.cancel()
        let start = ContinuousClock.now
        let error = await assertThrows(FederationError.self, code: .cancelled) { try await task.value }
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(10))
        XCTAssertNotNil(error)
        XCTAssertEqual(harness.fake.calls.count, 3, "a cancelled call is not retried")
        let after = try await harness.client.session("alice")
        XCTAssertEqual(after, before)
    }

    /// The same while the store is unreachable and a session is observed: the client's
    /// retries of the observed session's read wait without holding it, so the client goes
    /// (and its streams end) rather than living on its retries until the store is back.
    func testAClientReleasedDuringAnOutageGoesAndItsStreamsEnd() async throws {
        let spy = ScriptableKeystore(wrapping: InMemoryKeystore())
        spy.setUnreachable(true)
        var client: FederationClient? = try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
            transport: FakeCognito(expiration: testEpoch.addingTimeInterval(3600)).transport, keystore: spy, environment: [:],
            retryRunner: noSleepRunner(), now: { testEpoch }, logger: nil)
        let updates = await client!.stateUpdates(for: "alice")  // its read fails; retried later
        weak let released = client
        let streamEnded = LockedBox(false)
        let watching = Task {
            for await _ in updates {}
            streamEnded.withLock { $0 = true }
        }
        // The first read and two retries have failed (after 1 s and 2 s): the next retry
        // waits 4 s, which must not keep the client.
        let retried = await eventually(timeout: .seconds(10)) { spy.counts.reads >= 3 }
        XCTAssertTrue(retried, "the observed session's read was not retried")
        client = nil
        let gone = await eventually(timeout: .seconds(2)) { released == nil }
        XCTAssertTrue(gone, "the client lives on its own retries while the store is away")
        let ended = await eventually(timeout: .seconds(5)) { streamEnded.current }
        XCTAssertTrue(ended, "the observer's stream did not end")
        watching.cancel()
    }

    func testStreamsEndWhenTheClientIsReleased() async throws {
        var harness: Harness? = try Harness()
        let perSession = await harness!.client.stateUpdates(for: "alice")
        let all = await harness!.client.allStateUpdates()
        harness = nil
        // Each stream task reports its own end; a deadline task reports `nil`. Waiting stops
        // at the deadline (then the streams are cancelled), so a stream that never ends fails
        // the test instead of hanging it.
        let ended = await withTaskGroup(of: String?.self) { group -> Set<String> in
            group.addTask {
                for await _ in perSession {}
                return Task.isCancelled ? nil : "perSession"
            }
            group.addTask {
                for await _ in all {}
                return Task.isCancelled ? nil : "all"
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(5))
                return nil
            }
            var ended: Set<String> = []
            while ended.count < 2, let next = await group.next(), let stream = next {
                ended.insert(stream)
            }
            group.cancelAll()
            return ended
        }
        XCTAssertEqual(ended, ["perSession", "all"], "every stream finished within 5 s of the client going away")
    }
}
