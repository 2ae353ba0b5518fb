import BrokerTestSupport
import Federation
import Foundation
import XCTest

/// Retries through the whole client and libcurl: what is retried, how often,
/// what comes out when retries run out, and that a failed federation leaves an
/// earlier good session as it was.
final class ReliabilityRetryTests: ReliabilityTestCase {
    // MARK: Transient statuses

    func testTransientStatusesThenSuccessSucceedAfterThreeAttempts() async throws {
        let bodies: [Int: FakeCognito.Reply] = [
            500: .error("InternalErrorException", message: "scripted", status: 500),
            502: .wire(.respond(status: 502, headers: [("Content-Type", "text/html")], text: "<html>Bad Gateway</html>")),
            503: .wire(.respond(status: 503, text: "")),
            504: .wire(.respond(status: 504, headers: [("Content-Type", "text/html")], text: "<html>Gateway Timeout</html>")),
        ]
        for (status, failure) in bodies.sorted(by: { $0.key < $1.key }) {
            let cognito = try makeCognito()
            let client = try makeClient(cognito)
            cognito.enqueue(failure, failure, for: .getId)
            let result = try await client.federate(token: TestJWT.valid(), provider: .google, session: "s\(status)")
            XCTAssertEqual(result.identityId, FakeCognito.defaultIdentityId, "\(status)")
            XCTAssertEqual(cognito.operations, ["GetId", "GetId", "GetId", "GetCredentialsForIdentity"], "\(status)")
            let snapshot = try await client.session("s\(status)")
            XCTAssertEqual(snapshot.state, .federated, "\(status)")
            XCTAssertEqual(snapshot.credentials, result.credentials, "\(status)")
        }
    }

    func testTransientStatusOnCredentialsThenSuccessReplacesTheSession() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        let previous = try await establishGoodSession(client, cognito)
        cognito.enqueue(.respond(status: 502, text: "bad gateway"), for: .getCredentialsForIdentity)
        let result = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 2)
        XCTAssertEqual(cognito.count(.getId), 0, "the cached identity ID is used")
        let now = try await client.session("alice")
        XCTAssertEqual(now.state, .federated)
        XCTAssertEqual(now.credentials, result.credentials)
        XCTAssertNotEqual(now.credentials?.accessKeyId, previous.credentials?.accessKeyId)
    }

    func testServiceUnavailableThreeTimesFailsAfterExactlyThreeAttempts() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        let previous = try await establishGoodSession(client, cognito)
        cognito.setDefault(.respond(status: 503, text: "Service Unavailable"), for: .getCredentialsForIdentity)
        let error = await federateExpectingError(client, .serviceUnavailable)
        XCTAssertEqual(error?.httpStatus, 503)
        XCTAssertEqual(error?.operation, "GetCredentialsForIdentity")
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 3)
        XCTAssertEqual(cognito.count(.getId), 0)
        try await assertIntact(client, previous)
    }

    func testServiceUnavailableOnAFreshSessionLeavesItNotFederated() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        cognito.setDefault(.error("InternalErrorException", message: "scripted", status: 500), for: .getId)
        await federateExpectingError(client, session: "bob", .serviceUnavailable)
        XCTAssertEqual(cognito.operations, ["GetId", "GetId", "GetId"])
        try await assertNotFederated(client, session: "bob")
    }

    // MARK: Throttling

    func testHTTP429IsRetriedThenThrottled() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        let previous = try await establishGoodSession(client, cognito)
        cognito.setDefault(.respond(status: 429, text: ""), for: .getCredentialsForIdentity)
        let error = await federateExpectingError(client, .throttled)
        XCTAssertEqual(error?.httpStatus, 429)
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 3)
        try await assertIntact(client, previous)
    }

    func testTooManyRequestsExceptionIsRetriedThenThrottled() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        let previous = try await establishGoodSession(client, cognito)
        cognito.setDefault(
            .error("TooManyRequestsException", message: "Rate exceeded", status: 400),
            for: .getCredentialsForIdentity)
        let error = await federateExpectingError(client, .throttled)
        XCTAssertEqual(error?.serviceErrorType, "TooManyRequestsException")
        XCTAssertEqual(error?.serviceMessage, "Rate exceeded")
        XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 3)
        try await assertIntact(client, previous)
    }

    func testThrottlingThenSuccessSucceeds() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        cognito.enqueue(
            .wire(.respond(status: 429, text: "")),
            .error("TooManyRequestsException", message: "scripted", status: 400),
            for: .getId)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        XCTAssertEqual(cognito.count(.getId), 3)
        let snapshot = try await client.session("bob")
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testErrorTypeInHeaderWithHTMLBodyIsThrottling() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        cognito.setDefault(
            .respond(status: 400, headers: [("x-amzn-ErrorType", "ThrottlingException:http://internal.amazon.com/coral/")],
                     text: "<html>slow down</html>"),
            for: .getId)
        let error = await federateExpectingError(client, session: "bob", .throttled)
        XCTAssertEqual(error?.serviceErrorType, "ThrottlingException")
        XCTAssertEqual(cognito.count(.getId), 3)
        try await assertNotFederated(client, session: "bob")
    }

    // MARK: Never retried

    func testNonRetryableErrorsOnGetIdMakeExactlyOneAttempt() async throws {
        let cases: [(type: String, code: FederationError.Code)] = [
            ("NotAuthorizedException", .notAuthorized),
            ("InvalidParameterException", .invalidParameter),
            ("ResourceNotFoundException", .resourceNotFound),
            ("InvalidIdentityPoolConfigurationException", .invalidIdentityPoolConfiguration),
            ("LimitExceededException", .limitExceeded),
            ("SomeFutureException", .serviceError),
        ]
        for (type, code) in cases {
            let cognito = try makeCognito()
            let client = try makeClient(cognito)
            cognito.setDefault(.error(type, message: "scripted", status: 400), for: .getId)
            let error = await federateExpectingError(client, session: "bob", code)
            XCTAssertEqual(error?.serviceErrorType, type)
            XCTAssertEqual(error?.httpStatus, 400)
            XCTAssertEqual(cognito.operations, ["GetId"], type)
            try await assertNotFederated(client, session: "bob")
        }
    }

    func testNonRetryableHTTPStatusWithoutATypeMakesOneAttempt() async throws {
        for status in [400, 403, 404, 501] {
            let cognito = try makeCognito()
            let client = try makeClient(cognito)
            cognito.setDefault(.respond(status: status, headers: [("Content-Type", "text/html")], text: "<html>no</html>"), for: .getId)
            let error = await federateExpectingError(client, session: "bob", status >= 500 ? .serviceUnavailable : .serviceError)
            XCTAssertEqual(error?.httpStatus, status)
            XCTAssertEqual(cognito.count(.getId), 1, "HTTP \(status)")
            XCTAssertFalse(error?.message.contains("retries ran out") ?? true, "\(error?.message ?? "")")
            try await assertNotFederated(client, session: "bob")
        }
    }

    func testInvalidParameterOnCredentialsLeavesThePreviousSessionIntact() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        let previous = try await establishGoodSession(client, cognito)
        cognito.setDefault(.error("InvalidParameterException", message: "scripted", status: 400), for: .getCredentialsForIdentity)
        await federateExpectingError(client, .invalidParameter)
        XCTAssertEqual(cognito.operations, ["GetCredentialsForIdentity"])
        try await assertIntact(client, previous)
    }

    func testNotAuthorizedWithACachedIdentityAsksGetIdOnceAndNeverRetries() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        let previous = try await establishGoodSession(client, cognito)
        cognito.setDefault(
            .error("NotAuthorizedException", message: "Invalid login token.", status: 400),
            for: .getCredentialsForIdentity)
        await federateExpectingError(client, .notAuthorized)
        // The identity cache's single fallback through GetId, each call made once.
        XCTAssertEqual(cognito.operations, ["GetCredentialsForIdentity", "GetId", "GetCredentialsForIdentity"])
        try await assertIntact(client, previous)
    }

    func testResourceNotFoundOnCredentialsTerminatesTheSession() async throws {
        // The one fault design §4 lets change the session: the identity is gone.
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        _ = try await establishGoodSession(client, cognito)
        cognito.setDefault(
            .error("ResourceNotFoundException", message: "Identity not found.", status: 400),
            for: .getCredentialsForIdentity)
        await federateExpectingError(client, .identityTerminated)
        XCTAssertEqual(cognito.operations, ["GetCredentialsForIdentity", "GetId", "GetCredentialsForIdentity"])
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.state, .terminated)
        XCTAssertNil(snapshot.credentials)
    }

    // MARK: Server hints

    func testRetryAfterSecondsIsHonouredUpToTheCap() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) { $0.retry.retryAfterCap = .milliseconds(400) }
        // Asks for 30 s; the cap makes it 400 ms, far above the 20 ms backoff.
        cognito.enqueue(.respond(status: 503, headers: [("Retry-After", "30")], text: ""), for: .getId)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        let arrivals = cognito.calls(.getId)
        XCTAssertEqual(arrivals.count, 2)
        guard arrivals.count == 2 else { return }
        let gap = arrivals[0].time.duration(to: arrivals[1].time)
        XCTAssertGreaterThanOrEqual(gap, .milliseconds(400), "the hint lengthened the wait")
        XCTAssertLessThan(gap, .seconds(10), "the cap cut the 30 s hint")
    }

    func testAmazonRetryAfterMillisecondsIsHonouredAndPreferred() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) { $0.retry.retryAfterCap = .seconds(20) }
        // x-amz-retry-after (350 ms) wins over Retry-After (30 s, which would be 20 s capped).
        cognito.enqueue(
            .respond(status: 429, headers: [("Retry-After", "30"), ("x-amz-retry-after", "350")], text: ""),
            for: .getId)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        let arrivals = cognito.calls(.getId)
        XCTAssertEqual(arrivals.count, 2)
        guard arrivals.count == 2 else { return }
        let gap = arrivals[0].time.duration(to: arrivals[1].time)
        XCTAssertGreaterThanOrEqual(gap, .milliseconds(350))
        XCTAssertLessThan(gap, .seconds(10), "Retry-After was not used")
    }

    func testRetryAfterHTTPDateIsHonoured() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) { $0.retry.retryAfterCap = .milliseconds(300) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let later = formatter.string(from: Date().addingTimeInterval(60))
        cognito.enqueue(.respond(status: 503, headers: [("Retry-After", later)], text: ""), for: .getId)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        let arrivals = cognito.calls(.getId)
        XCTAssertEqual(arrivals.count, 2)
        guard arrivals.count == 2 else { return }
        XCTAssertGreaterThanOrEqual(arrivals[0].time.duration(to: arrivals[1].time), .milliseconds(300))
    }

    func testRetryAfterOnANonRetryableErrorDoesNotCauseARetry() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        cognito.setDefault(
            .error("NotAuthorizedException", message: "scripted", headers: [("Retry-After", "1"), ("Content-Type", "application/x-amz-json-1.1")]),
            for: .getId)
        await federateExpectingError(client, session: "bob", .notAuthorized)
        XCTAssertEqual(cognito.count(.getId), 1)
    }
}
