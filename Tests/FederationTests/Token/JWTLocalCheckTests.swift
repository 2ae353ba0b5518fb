import BrokerTestSupport
@testable import Federation
import Foundation
import XCTest

/// JWT-shaped tokens are checked locally, before any request.
final class JWTLocalCheckTests: XCTestCase {
    private let jwtProviders: [AuthProvider] = [.google, .apple, .oidc(issuer: "login.example.com"), .developer]

    private func assertRejectedLocally(_ token: String, _ what: String, line: UInt = #line) async throws {
        for provider in jwtProviders {
            let harness = try Harness()
            let error = await assertThrows(FederationError.self, code: .invalidToken, line: line) {
                try await harness.client.federate(token: token, provider: provider, session: "s")
            }
            XCTAssertEqual(harness.fake.calls.count, 0, "\(what) for \(provider): no network call", line: line)
            XCTAssertNil(leakedRun(in: error?.message ?? "", of: [token]), "the error never echoes the token", line: line)
            let snapshot = try await harness.client.session("s")
            XCTAssertEqual(snapshot.state, .notFederated, line: line)
        }
    }

    /// `"exp": -1e19` trapped an `Int` conversion (a crash, not an error) before.
    func testAnExpClaimOutsideIntRangeIsAnInvalidTokenNotACrash() async throws {
        for exp in ["-1e19", "-9.3e18", "-1.7976931348623157e308"] {
            let token = TestJWT.make(headerJSON: #"{"alg":"RS256"}"#, payloadJSON: #"{"sub":"s","exp":\#(exp)}"#)
            try await assertRejectedLocally(token, "exp \(exp)")
        }
        let far = TestJWT.make(headerJSON: #"{"alg":"RS256"}"#, payloadJSON: #"{"sub":"s","exp":1e19}"#)
        let harness = try Harness()
        try await harness.client.federate(token: far, provider: .google, session: "s")
        XCTAssertEqual(harness.fake.count(.getCredentialsForIdentity), 1, "a token valid far into the future is sent")
    }

    func testTokenWithoutThreePartsIsRejected() async throws {
        try await assertRejectedLocally("opaque-access-token", "one part")
        let valid = TestJWT.valid()
        let parts = valid.split(separator: ".")
        try await assertRejectedLocally("\(parts[0]).\(parts[1])", "two parts")
        try await assertRejectedLocally("\(valid).extra", "four parts")
    }

    func testTokenWithBadBase64IsRejected() async throws {
        let valid = TestJWT.valid().split(separator: ".").map(String.init)
        try await assertRejectedLocally("\(valid[0]).\(valid[1])!!*.\(valid[2])", "payload with non-base64url bytes")
        try await assertRejectedLocally("@@@@.\(valid[1]).\(valid[2])", "header with non-base64url bytes")
        try await assertRejectedLocally("\(valid[0]).a.\(valid[2])", "payload of impossible length")
    }

    func testPayloadThatIsNotAJSONObjectIsRejected() async throws {
        let header = #"{"alg":"RS256"}"#
        for payload in [#"["sub","exp"]"#, #""just a string""#, "42", "not json at all"] {
            try await assertRejectedLocally(TestJWT.make(headerJSON: header, payloadJSON: payload), "payload \(payload)")
        }
    }

    func testHeaderThatIsNotAJSONObjectIsRejected() async throws {
        try await assertRejectedLocally(TestJWT.make(headerJSON: "[1]", payloadJSON: #"{"sub":"x"}"#), "array header")
    }

    func testEmptySignatureIsRejected() async throws {
        try await assertRejectedLocally(TestJWT.make(headerJSON: #"{"alg":"none"}"#, payloadJSON: #"{"sub":"x"}"#, signature: ""), "empty signature")
    }

    func testExpClaimOfTheWrongTypeIsRejected() async throws {
        try await assertRejectedLocally(
            TestJWT.make(headerJSON: #"{"alg":"RS256"}"#, payloadJSON: #"{"sub":"x","exp":"tomorrow"}"#), "string exp")
    }

    func testTokenExpiredTenMinutesAgoIsRejected() async throws {
        try await assertRejectedLocally(TestJWT.make(sub: "x", exp: testEpoch.addingTimeInterval(-600)), "exp 10 min past")
    }

    func testTokenExpiredTwoMinutesAgoIsAccepted() async throws {
        for provider in jwtProviders {
            let harness = try Harness()
            let token = TestJWT.make(sub: "us-east-1:sub", exp: testEpoch.addingTimeInterval(-120))
            try await harness.client.federate(token: token, provider: provider, session: "s")
            XCTAssertEqual(harness.fake.count(.getCredentialsForIdentity), 1, "\(provider)")
        }
    }

    func testExpiryToleranceFollowsTheInjectedClock() async throws {
        // The same token is fine at the epoch and stale once the clock moves 10 minutes on.
        let harness = try Harness()
        let token = TestJWT.make(sub: "us-east-1:sub", exp: testEpoch)
        try await harness.client.federate(token: token, provider: .google, session: "s")
        harness.clock.advance(by: 600)
        harness.fake.resetRecording()
        await assertThrows(FederationError.self, code: .invalidToken) { try await harness.client.federate(token: token, provider: .google, session: "s") }
        XCTAssertEqual(harness.fake.calls.count, 0)
    }

    func testTokenWithoutExpIsAcceptedForNonDeveloperProviders() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.make(sub: "x", exp: nil), provider: .oidc(issuer: "login.example.com"))
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetCredentialsForIdentity"])
    }

    func testPaddedBase64URLSegmentsAreAccepted() async throws {
        func padded(_ json: String) -> String {
            Data(json.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        }
        let header = padded(#"{"alg":"RS256","t":1}"#)
        let payload = padded(#"{"sub":"us-east-1:p","exp":1700003600}"#)
        XCTAssertTrue(header.hasSuffix("=") || payload.hasSuffix("="), "the test needs a padded segment")
        let harness = try Harness()
        try await harness.client.federate(token: "\(header).\(payload).sig", provider: .developer)
        XCTAssertEqual(harness.fake.calls.first?.string("IdentityId"), "us-east-1:p")
    }

    func testDeveloperTokenWithAGivenIdentityIdIsNotParsed() async throws {
        let harness = try Harness()
        try await harness.client.federate(
            token: "not.a-jwt", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:given"))
        XCTAssertEqual(harness.fake.count(.getCredentialsForIdentity), 1)
    }

    func testParsedClaims() throws {
        let jwt = try JSONWebToken(parsing: TestJWT.make(sub: "subject-1", exp: testEpoch, iss: "https://issuer.example"))
        XCTAssertEqual(jwt.subject, "subject-1")
        XCTAssertEqual(jwt.expiresAt, testEpoch.timeIntervalSince1970)
        XCTAssertEqual(jwt.issuer, "https://issuer.example")
        XCTAssertNoThrow(try jwt.checkNotExpired(now: testEpoch.addingTimeInterval(299)))
        assertThrows(FederationError.self, code: .invalidToken) { try jwt.checkNotExpired(now: testEpoch.addingTimeInterval(301)) }
    }
}
