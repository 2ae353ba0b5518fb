import BrokerTestSupport
@testable import Federation
import Foundation
import XCTest

/// Retries through the client, with a runner that never sleeps.
final class FederationClientRetryTests: XCTestCase {
    func testServiceUnavailableThenSuccessSucceedsAfterTwoCalls() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.error(nil, status: 503), for: .getId)
        let result = try await harness.client.federate(token: TestJWT.valid(), provider: .google)
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetId", "GetCredentialsForIdentity"])
        XCTAssertEqual(result.identityId, FakeCognito.defaultIdentityId)
    }

    func testInternalErrorOnGetCredentialsIsRetried() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.error("InternalErrorException", message: "An internal error occurred", status: 500), for: .getCredentialsForIdentity)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google)
        XCTAssertEqual(harness.fake.count(.getCredentialsForIdentity), 2)
    }

    func testThrottlingIsRetried() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.error("TooManyRequestsException", message: "Rate exceeded", status: 400), for: .getId)
        harness.fake.enqueue(.error(nil, status: 429), for: .getId)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google)
        XCTAssertEqual(harness.fake.count(.getId), 3)
    }

    func testNotAuthorizedIsNeverRetried() async throws {
        let harness = try Harness()
        harness.fake.setDefault(.error("NotAuthorizedException", message: "Invalid login token."), for: .getId)
        await assertThrows(FederationError.self, code: .notAuthorized) { try await harness.client.federate(token: TestJWT.valid(), provider: .google) }
        XCTAssertEqual(harness.fake.calls.count, 1)
    }

    func testInvalidResponseIsNeverRetried() async throws {
        let harness = try Harness()
        harness.fake.setDefault(.raw(body: "{\"Ident"), for: .getId)
        await assertThrows(FederationError.self, code: .invalidResponse) { try await harness.client.federate(token: TestJWT.valid(), provider: .google) }
        XCTAssertEqual(harness.fake.calls.count, 1)
    }

    func testPersistentServiceFailureStopsAfterMaxAttempts() async throws {
        let harness = try Harness()
        harness.fake.setDefault(.error(nil, status: 503), for: .getId)
        let error = await assertThrows(FederationError.self, code: .serviceUnavailable) {
            try await harness.client.federate(token: TestJWT.valid(), provider: .google)
        }
        XCTAssertEqual(harness.fake.calls.count, RetryPolicy.standard.maxAttempts)
        XCTAssertEqual(error?.httpStatus, 503)
    }

    func testRetryPolicyNoneMakesOneAttempt() async throws {
        let harness = try Harness(retry: .none)
        harness.fake.setDefault(.error(nil, status: 503), for: .getId)
        await assertThrows(FederationError.self, code: .serviceUnavailable) { try await harness.client.federate(token: TestJWT.valid(), provider: .google) }
        XCTAssertEqual(harness.fake.calls.count, 1)
    }

    func testConnectionFailureIsRetriedAndThenReportedAsNetwork() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.transportFailure(TransportError(kind: .connectFailed, curlCode: 7, message: "refused")), for: .getId)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "a")
        XCTAssertEqual(harness.fake.count(.getId), 2)

        let failing = try Harness(retry: .none)
        failing.fake.setDefault(.transportFailure(TransportError(kind: .connectFailed, curlCode: 7, message: "refused")), for: .getId)
        let error = await assertThrows(FederationError.self, code: .network) { try await failing.client.federate(token: TestJWT.valid(), provider: .google) }
        XCTAssertEqual(error?.curlCode, 7)
    }
}
