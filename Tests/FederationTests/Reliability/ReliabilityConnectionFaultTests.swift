import BrokerTestSupport
import Federation
import Foundation
import InMemoryLogging
import Logging
import XCTest

/// Faults below HTTP: refused connections, drops, resets, truncated bodies,
/// slow drips and late answers. Each is retried (as a transient error or a
/// timeout) and, when retries run out, leaves an earlier good session as it was.
final class ReliabilityConnectionFaultTests: ReliabilityTestCase {
    private static let successBody = FakeCognito.credentialsJSON(
        identityId: FakeCognito.defaultIdentityId, accessKeyId: "ASIALATE", expiration: Date().addingTimeInterval(3600))

    // MARK: Refused

    func testConnectionRefusedIsRetriedThenNetworkAndThePreviousSessionIsIntact() async throws {
        let cognito = try makeCognito()
        let (logger, handler) = memoryLogger()
        let client = try makeClient(cognito, logger: logger)
        let previous = try await establishGoodSession(client, cognito)
        cognito.stopServing()  // nothing listens on the port any more
        handler.clear()

        let start = ContinuousClock.now
        let error = await federateExpectingError(client, .network)
        XCTAssertLessThan(start.duration(to: .now), .seconds(10), "returns promptly")
        XCTAssertEqual(error?.curlCode, 7, "CURLE_COULDNT_CONNECT")
        XCTAssertEqual(error?.operation, "GetCredentialsForIdentity")
        XCTAssertEqual(retriesLogged(handler), 2, "3 attempts in all")
        // Each retry line says what failed, not only the wrapper every attempt's failure is in.
        let retried = handler.entries.filter { $0.message == "Retrying after a failed attempt" }
        XCTAssertEqual(retried.map { $0.metadata["broker.error"] }, ["network", "network"])
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 0)
        try await assertIntact(client, previous)
    }

    // MARK: Dropped, reset, truncated

    func testDropBeforeAnswerIsRetriedThenSucceeds() async throws {
        let cognito = try makeCognito()
        let (logger, handler) = memoryLogger()
        let client = try makeClient(cognito, logger: logger)
        cognito.enqueue(.drop, for: .getId)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        XCTAssertEqual(retriesLogged(handler), 1, "a retry of the retry mode, not a libcurl resend")
        XCTAssertEqual(cognito.operations, ["GetId", "GetId", "GetCredentialsForIdentity"])
        let snapshot = try await client.session("bob")
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testDropEveryTimeFailsAsNetworkAfterThreeAttempts() async throws {
        try await assertRetriedConnectionFault(.drop, code: .network, curlCode: 52)  // CURLE_GOT_NOTHING
    }

    func testDropOnAReusedConnectionIsResentOnceByLibcurl() async throws {
        // libcurl resends a request, once and on a fresh connection, when a
        // reused connection closes before any byte of the answer (the race with
        // a server closing an idle keep-alive connection). That is not an attempt
        // of the retry mode: no retry is logged, and with the retry mode off
        // (one attempt) the call still succeeds.
        for fault in [ScriptedResponse.drop, .reset] {
            let cognito = try makeCognito()
            let (logger, handler) = memoryLogger()
            let client = try makeClient(cognito, logger: logger) { $0.retry = .none }
            _ = try await establishGoodSession(client, cognito)
            cognito.enqueue(fault, for: .getCredentialsForIdentity)
            handler.clear()
            try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
            let arrivals = cognito.calls(.getCredentialsForIdentity)
            XCTAssertEqual(arrivals.count, 2)
            XCTAssertEqual(retriesLogged(handler), 0, "one attempt of the retry mode")
            XCTAssertNotEqual(arrivals.first?.connectionID, arrivals.last?.connectionID)
        }
    }

    func testResetIsRetriedThenSucceeds() async throws {
        let cognito = try makeCognito()
        let (logger, handler) = memoryLogger()
        let client = try makeClient(cognito, logger: logger)
        cognito.closesConnections = true
        let previous = try await establishGoodSession(client, cognito)
        cognito.enqueue(.reset, for: .getCredentialsForIdentity)
        let result = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        XCTAssertEqual(retriesLogged(handler), 1, "a retry of the retry mode, not a libcurl resend")
        XCTAssertEqual(cognito.operations, ["GetCredentialsForIdentity", "GetCredentialsForIdentity"])
        XCTAssertNotEqual(result.credentials, previous.credentials)
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.credentials, result.credentials)
    }

    func testResetEveryTimeFailsAsNetworkAfterThreeAttempts() async throws {
        try await assertRetriedConnectionFault(.reset, code: .network, curlCode: nil)
    }

    func testTruncatedBodyIsRetriedThenSucceeds() async throws {
        let cognito = try makeCognito()
        let (logger, handler) = memoryLogger()
        let client = try makeClient(cognito, logger: logger)
        let body = Array(Self.successBody.utf8)
        cognito.enqueue(.truncated(declaredLength: body.count, body: Array(body.prefix(40))), for: .getCredentialsForIdentity)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        XCTAssertEqual(retriesLogged(handler), 1, "a retry of the retry mode, not a libcurl resend")
        XCTAssertEqual(cognito.operations, ["GetId", "GetCredentialsForIdentity", "GetCredentialsForIdentity"])
        let snapshot = try await client.session("bob")
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testTruncatedBodyEveryTimeFailsAsNetworkAfterThreeAttempts() async throws {
        let body = Array(Self.successBody.utf8)
        try await assertRetriedConnectionFault(
            .truncated(declaredLength: body.count, body: Array(body.prefix(40))), code: .network, curlCode: 18)  // CURLE_PARTIAL_FILE
    }

    // MARK: Slow and late

    func testSlowDripPastTheRequestTimeoutTimesOutWithTimeoutRetries() async throws {
        // 1 byte every 50 ms: the whole body would take seconds; each attempt has 500 ms.
        let drip = ScriptedResponse.slowDrip(
            headers: [("Content-Type", "application/x-amz-json-1.1")], body: Array(Self.successBody.utf8),
            chunkSize: 1, interval: .milliseconds(50))
        try await assertRetriedConnectionFault(drip, code: .timedOut, curlCode: 28)  // CURLE_OPERATION_TIMEDOUT
    }

    func testSlowDripWithinTheRequestTimeoutSucceeds() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) { $0.requestTimeout = .seconds(10) }
        cognito.enqueue(
            .slowDrip(headers: [("Content-Type", "application/x-amz-json-1.1")],
                      body: Array(#"{"IdentityId":"\#(FakeCognito.defaultIdentityId)"}"#.utf8), chunkSize: 8, interval: .milliseconds(5)),
            for: .getId)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        XCTAssertEqual(cognito.operations, ["GetId", "GetCredentialsForIdentity"])
    }

    func testAnswerLaterThanTheRequestTimeoutTimesOutWithTimeoutRetries() async throws {
        try await assertRetriedConnectionFault(
            .json(Self.successBody).delayed(by: .seconds(30)), code: .timedOut, curlCode: 28)
    }

    func testOneLateAnswerIsRetriedThenSucceeds() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        let previous = try await establishGoodSession(client, cognito)
        cognito.enqueue(.json(Self.successBody).delayed(by: .seconds(30)), for: .getCredentialsForIdentity)
        let result = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 2)
        XCTAssertNotEqual(result.credentials.accessKeyId, "ASIALATE", "the late answer was not used")
        XCTAssertNotEqual(result.credentials, previous.credentials)
    }

    // MARK: Helpers

    /// Scripts `fault` for every GetCredentialsForIdentity call after a good
    /// session was established, and checks: the error code (and CURLcode), 3
    /// attempts at the server, a prompt return, and the previous session intact.
    private func assertRetriedConnectionFault(
        _ fault: ScriptedResponse,
        code: FederationError.Code,
        curlCode: Int32?,
        file: StaticString = #filePath,
        line: UInt = #line
    ) async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        // The first faulty attempt starts on a fresh connection, as the later
        // ones do after a fault: see testDropOnAReusedConnectionIsResentOnceByLibcurl.
        cognito.closesConnections = true
        let previous = try await establishGoodSession(client, cognito, file: file, line: line)
        cognito.setDefault(fault, for: .getCredentialsForIdentity)

        let start = ContinuousClock.now
        let error = await federateExpectingError(client, code, file: file, line: line)
        XCTAssertLessThan(start.duration(to: .now), .seconds(15), "returns promptly", file: file, line: line)
        if let curlCode {
            XCTAssertEqual(error?.curlCode, curlCode, "\(String(describing: error))", file: file, line: line)
        } else {
            XCTAssertNotNil(error?.curlCode, file: file, line: line)
        }
        XCTAssertEqual(error?.operation, "GetCredentialsForIdentity", file: file, line: line)
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 3, "attempts: \(cognito.operations)", file: file, line: line)
        XCTAssertEqual(cognito.count(.getId), 0, file: file, line: line)
        try await assertIntact(client, previous, file: file, line: line)
    }
}
