import BrokerTestSupport
@testable import Federation
import Foundation
import XCTest

/// The identity ID cached per session, and the one retry through GetId when the service rejects it.
final class FederationClientIdentityCacheTests: XCTestCase {
    private let cached = "us-east-1:cached-identity"

    private func federatedHarness() async throws -> Harness {
        let harness = try Harness()
        harness.fake.enqueue(.identityId(cached), for: .getId)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.fake.resetRecording()
        return harness
    }

    func testSecondFederationOfTheSameSessionSkipsGetId() async throws {
        let harness = try await federatedHarness()
        let token = TestJWT.valid(sub: "fresh")
        let result = try await harness.client.federate(token: token, provider: .google, session: "alice")
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"])
        XCTAssertEqual(harness.fake.calls.first?.string("IdentityId"), cached)
        XCTAssertEqual(harness.fake.calls.first?.logins, ["accounts.google.com": token])
        XCTAssertEqual(result.identityId, cached)
    }

    func testTheCacheIsPerSession() async throws {
        let harness = try await federatedHarness()
        harness.fake.enqueue(.identityId("us-east-1:bob"), for: .getId)
        try await harness.client.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "bob")
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetCredentialsForIdentity"])
        XCTAssertEqual(harness.fake.calls.last?.string("IdentityId"), "us-east-1:bob")
    }

    func testExpiredSessionStillUsesItsCachedIdentity() async throws {
        let harness = try await federatedHarness()
        harness.clock.advance(by: 7200)
        let expired = try await harness.client.session("alice")
        XCTAssertEqual(expired.state, .expired)
        let fresh = TestJWT.make(sub: "x", exp: harness.clock.now.addingTimeInterval(600))
        harness.fake.expiration = harness.clock.now.addingTimeInterval(3600)
        try await harness.client.federate(token: fresh, provider: .google, session: "alice")
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"])
        XCTAssertEqual(harness.fake.calls.first?.string("IdentityId"), cached)
    }

    func testNotAuthorizedOnTheCachedIdDropsItAndAsksGetIdOnce() async throws {
        try await assertRetryThroughGetId(after: .error("NotAuthorizedException", message: "Logins don't match.", status: 400))
    }

    func testResourceNotFoundOnTheCachedIdDropsItAndAsksGetIdOnce() async throws {
        try await assertRetryThroughGetId(after: .error("ResourceNotFoundException", message: "Identity not found.", status: 400))
    }

    private func assertRetryThroughGetId(after rejection: FakeCognito.Reply, line: UInt = #line) async throws {
        let harness = try await federatedHarness()
        harness.fake.enqueue(rejection, for: .getCredentialsForIdentity)
        harness.fake.enqueue(.identityId("us-east-1:replacement"), for: .getId)
        let token = TestJWT.valid(sub: "again")

        let result = try await harness.client.federate(token: token, provider: .google, session: "alice")

        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity", "GetId", "GetCredentialsForIdentity"], line: line)
        XCTAssertEqual(harness.fake.calls[0].string("IdentityId"), cached, line: line)
        XCTAssertEqual(harness.fake.calls[1].logins, ["accounts.google.com": token], line: line)
        XCTAssertEqual(harness.fake.calls[2].string("IdentityId"), "us-east-1:replacement", line: line)
        XCTAssertEqual(result.identityId, "us-east-1:replacement", line: line)
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .federated, line: line)
        XCTAssertEqual(snapshot.identityId, "us-east-1:replacement", line: line)

        // The replacement is the new cached ID.
        harness.fake.resetRecording()
        try await harness.client.federate(token: token, provider: .google, session: "alice")
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"], line: line)
        XCTAssertEqual(harness.fake.calls.first?.string("IdentityId"), "us-east-1:replacement", line: line)
    }

    func testASecondNotAuthorizedAfterTheRetryFailsAndKeepsThePreviousSession() async throws {
        let harness = try await federatedHarness()
        let before = try await harness.client.session("alice")
        harness.fake.enqueue(.error("NotAuthorizedException", message: "Logins don't match."), for: .getCredentialsForIdentity)
        harness.fake.enqueue(.identityId("us-east-1:replacement"), for: .getId)
        harness.fake.enqueue(.error("NotAuthorizedException", message: "Invalid login token."), for: .getCredentialsForIdentity)

        let error = await assertThrows(FederationError.self, code: .notAuthorized) {
            try await harness.client.federate(token: TestJWT.valid(sub: "x"), provider: .google, session: "alice")
        }
        XCTAssertEqual(error?.operation, "GetCredentialsForIdentity")
        XCTAssertEqual(error?.httpStatus, 400)
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity", "GetId", "GetCredentialsForIdentity"], "exactly one retry")
        let after = try await harness.client.session("alice")
        XCTAssertEqual(after, before)
        XCTAssertEqual(after.identityId, cached, "the rejected retry does not replace the cached ID")
        XCTAssertEqual(after.state, .federated)
    }

    func testNotAuthorizedWithoutACachedIdIsNotRetried() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.error("NotAuthorizedException", message: "Invalid login token."), for: .getCredentialsForIdentity)
        await assertThrows(FederationError.self, code: .notAuthorized) {
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetCredentialsForIdentity"])
    }

    func testNotAuthorizedForADeveloperProvidedIdIsNotRetriedThroughGetId() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.error("NotAuthorizedException", message: "Invalid login token."), for: .getCredentialsForIdentity)
        await assertThrows(FederationError.self, code: .notAuthorized) {
            try await harness.client.federate(
                token: "opaque", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:d"))
        }
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"], "a developer token never goes to GetId")
    }

    /// A developer-provided identity ID that no Cognito identity ID looks like (base64, a
    /// token pasted in its place, no region) is refused before any request, without quoting it.
    func testADeveloperProvidedIdOfAnotherShapeIsRefusedBeforeAnyRequest() async throws {
        let harness = try Harness()
        for identityId in ["dGhpcyBpcyBub3QgYW4gaWQ+Lz0=", "0f1e2d3c-aaaa", "eu-west-2:", "eu-west-2:a b", TestJWT.valid()] {
            let error = await assertThrows(FederationError.self, code: .invalidConfiguration) {
                try await harness.client.federate(
                    token: "opaque", provider: .developer, options: FederationOptions(developerProvidedIdentityId: identityId), session: "dev")
            }
            XCTAssertFalse(error?.message.contains(identityId) ?? true, "the value is quoted: \(error?.message ?? "")")
        }
        // Nor a role that is no IAM role ARN, in the enhanced flow as in the classic one.
        for roleArn in ["reader", "arn:aws:iam::123456789012:user/alice", "arn:aws:s3:::bucket"] {
            let error = await assertThrows(FederationError.self, code: .invalidConfiguration) {
                try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: FederationOptions(customRoleArn: roleArn), session: "dev")
            }
            XCTAssertTrue(error?.message.contains("is not an IAM role ARN") ?? false, "\(error?.message ?? "")")
        }
        XCTAssertEqual(harness.fake.operations, [], "nothing was sent")
        let snapshot = try await harness.client.session("dev")
        XCTAssertEqual(snapshot.state, .notFederated)
    }

    func testOtherErrorsOnTheCachedIdAreNotRetriedThroughGetId() async throws {
        let harness = try await federatedHarness()
        harness.fake.enqueue(.error("InvalidParameterException", message: "bad"), for: .getCredentialsForIdentity)
        await assertThrows(FederationError.self, code: .invalidParameter) {
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"])
    }
}
