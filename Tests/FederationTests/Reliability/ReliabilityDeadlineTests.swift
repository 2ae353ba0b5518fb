import BrokerTestSupport
import Federation
import Foundation
import Synchronization
import XCTest

/// The bound on a whole federation (``FederationConfiguration/federationTimeout``)
/// and task cancellation: both end the call promptly, mid-transfer or mid-backoff,
/// with the session back where it was.
final class ReliabilityDeadlineTests: ReliabilityTestCase {
    func testFederationTimeoutBoundsAnAttemptWhoseOwnTimeoutIsLonger() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) {
            $0.requestTimeout = .seconds(30)
            $0.federationTimeout = .seconds(1)
        }
        let previous = try await establishGoodSession(client, cognito)
        cognito.setDefault(.json("{}").delayed(by: .seconds(60)), for: .getCredentialsForIdentity)

        let start = ContinuousClock.now
        let error = await federateExpectingError(client, .timedOut)
        XCTAssertLessThan(start.duration(to: .now), .seconds(10), "bounded by the 1 s federation timeout, not the 30 s attempt timeout")
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 1, "no retry once the deadline has passed")
        XCTAssertEqual(error?.curlCode, 28)
        try await assertIntact(client, previous)
    }

    func testFederationTimeoutBoundsRetriesOfSlowAttempts() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) {
            $0.requestTimeout = .milliseconds(400)
            $0.federationTimeout = .seconds(3)
            $0.retry.maxAttempts = 50
        }
        cognito.setDefault(.json("{}").delayed(by: .seconds(60)), for: .getId)
        let start = ContinuousClock.now
        await federateExpectingError(client, session: "bob", .timedOut)
        XCTAssertLessThan(start.duration(to: .now), .seconds(15))
        // A load that slows the attempts only lowers the count.
        XCTAssertLessThanOrEqual(cognito.count(.getId), 8, "3 s hold at most 8 attempts of 400 ms")
        XCTAssertGreaterThanOrEqual(cognito.count(.getId), 2, "timeouts are retried while time is left")
        try await assertNotFederated(client, session: "bob")
    }

    func testRetryAfterBeyondTheFederationTimeoutEndsTheCallAtOnce() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) {
            $0.federationTimeout = .seconds(2)
            $0.retry.retryAfterCap = .seconds(20)
        }
        let previous = try await establishGoodSession(client, cognito)
        cognito.setDefault(.respond(status: 503, headers: [("Retry-After", "15")], text: ""), for: .getCredentialsForIdentity)
        let start = ContinuousClock.now
        let error = await federateExpectingError(client, .serviceUnavailable)
        XCTAssertLessThan(start.duration(to: .now), .seconds(10), "did not wait out the 15 s hint")
        XCTAssertEqual(error?.httpStatus, 503)
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 1)
        try await assertIntact(client, previous)
    }

    // MARK: Cancellation

    func testCancellationMidTransferReturnsPromptlyAndRestoresTheSession() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) { $0.requestTimeout = .seconds(30) }
        let previous = try await establishGoodSession(client, cognito)
        let states = await client.stateUpdates(for: "alice")
        cognito.enqueue(.json("{}").delayed(by: .seconds(60)), for: .getCredentialsForIdentity)

        let token = TestJWT.valid()
        let task = Task { try await client.federate(token: token, provider: .google, session: "alice") }
        let arrived = await eventually { cognito.count(.getCredentialsForIdentity) == 1 }
        XCTAssertTrue(arrived, "the request reached the server")
        let during = try await client.session("alice")
        XCTAssertEqual(during.state, .federating)

        let start = ContinuousClock.now
        task.cancel()
        let result = await task.result
        XCTAssertLessThan(start.duration(to: .now), .seconds(3), "returned long before the server's 60 s delay")
        XCTAssertThrowsError(try result.get()) { error in
            XCTAssertEqual((error as? FederationError)?.code, .cancelled, "\(error)")
        }
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 1, "no retry after cancellation")
        try await assertIntact(client, previous)
        let seen = await collect(3, from: states, timeout: .seconds(5))
        XCTAssertEqual(seen, [.federated, .federating, .federated])

        // The client and its transport keep working.
        let next = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let after = try await client.session("alice")
        XCTAssertEqual(after.credentials, next.credentials)
    }

    func testCancellationDuringBackoffReturnsPromptly() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) { $0.retry.retryAfterCap = .seconds(20) }
        let previous = try await establishGoodSession(client, cognito)
        // The first answer asks for a 15 s wait before the retry.
        cognito.enqueue(.respond(status: 503, headers: [("Retry-After", "15")], text: ""), for: .getCredentialsForIdentity)
        let token = TestJWT.valid()
        let task = Task { try await client.federate(token: token, provider: .google, session: "alice") }
        let arrived = await eventually { cognito.count(.getCredentialsForIdentity) == 1 }
        XCTAssertTrue(arrived)
        try await Task.sleep(for: .milliseconds(100))  // let the client reach its backoff

        let start = ContinuousClock.now
        task.cancel()
        let result = await task.result
        XCTAssertLessThan(start.duration(to: .now), .seconds(3), "did not sleep out the 15 s")
        XCTAssertThrowsError(try result.get()) { error in
            XCTAssertEqual((error as? FederationError)?.code, .cancelled, "\(error)")
        }
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 1)
        try await assertIntact(client, previous)
    }

    func testCancellationOfAFreshSessionLeavesItNotFederated() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) { $0.requestTimeout = .seconds(30) }
        cognito.enqueue(.json("{}").delayed(by: .seconds(60)), for: .getId)
        let token = TestJWT.valid()
        let task = Task { try await client.federate(token: token, provider: .google, session: "bob") }
        let arrived = await eventually { cognito.count(.getId) == 1 }
        XCTAssertTrue(arrived)
        task.cancel()
        let result = await task.result
        assertThrows(FederationError.self, code: .cancelled) { try result.get() }
        try await assertNotFederated(client, session: "bob")
    }
}
