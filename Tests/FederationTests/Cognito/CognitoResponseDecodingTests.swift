import BrokerTestSupport
@testable import Federation
import Foundation
import Logging
import XCTest

/// Successful Cognito Identity responses → results, and what happens when they are malformed.
final class CognitoResponseDecodingTests: XCTestCase {
    /// The fixtures' credentials expire at 1_522_664_214 (2018): a client reading them runs an
    /// hour before, or it refuses them as already expired.
    private let fixtureClock = Date(timeIntervalSince1970: 1_522_660_614)

    private func federateWith(_ reply: FakeCognito.Reply, at now: Date = testEpoch) async throws -> Result<FederationResult, FederationError> {
        let harness = try Harness(clock: TestClock(now), retry: .none)
        harness.fake.enqueue(.identityId("us-east-1:asked"), for: .getId)
        harness.fake.enqueue(reply, for: .getCredentialsForIdentity)
        do {
            return .success(try await harness.client.federate(token: TestJWT.valid(), provider: .google))
        } catch {
            return .failure(error)
        }
    }

    func testExponentFormExpirationFromTheFixture() async throws {
        let result = try await federateWith(.init(status: 200, body: try Fixtures.bytes("GetCredentialsForIdentity.success")), at: fixtureClock).get()
        XCTAssertEqual(result.credentials.expiration, Date(timeIntervalSince1970: 1_522_664_214))
        XCTAssertEqual(result.credentials.accessKeyId, "ASIAXAMPLEFIXTURE0001")
        XCTAssertEqual(result.credentials.secretAccessKey, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFIXTUREKEY")
        XCTAssertTrue(result.credentials.sessionToken.hasPrefix("IQoJb3JpZ2luX2VjEXAMPLE"))
        XCTAssertEqual(result.identityId, "us-east-1:e5a2c3b1-7d4f-4a9e-8c21-3f6b9d0a1e55")
    }

    func testFractionalExpirationFromTheFixture() async throws {
        let result = try await federateWith(.init(status: 200, body: try Fixtures.bytes("GetCredentialsForIdentity.fractional-expiration")), at: fixtureClock).get()
        XCTAssertEqual(result.credentials.expiration.timeIntervalSince1970, 1_522_664_214.625, accuracy: 0.0005)
    }

    func testExpirationForms() throws {
        for (literal, expected) in [
            ("1.522664214E9", 1_522_664_214.0), ("1.522664214e+9", 1_522_664_214.0), ("1522664214", 1_522_664_214.0),
            ("1522664214.5", 1_522_664_214.5), ("\"1522664214\"", 1_522_664_214.0),
        ] {
            let output = try CognitoResponseDecoder.decode(
                GetCredentialsForIdentityOutput.self, from: FakeCognito.credentialsBody(identityId: "id", expirationLiteral: literal),
                operation: "GetCredentialsForIdentity")
            XCTAssertEqual(output.Credentials.Expiration.date.timeIntervalSince1970, expected, accuracy: 0.0005, literal)
        }
    }

    func testBadExpirationsAreInvalidResponses() throws {
        for literal in ["null", "-5", "0", "\"soon\"", "true", "1e300"] {
            XCTAssertThrowsError(
                try CognitoResponseDecoder.decode(
                    GetCredentialsForIdentityOutput.self, from: FakeCognito.credentialsBody(identityId: "id", expirationLiteral: literal),
                    operation: "GetCredentialsForIdentity"), literal
            ) { error in
                XCTAssertEqual((error as? FederationError)?.code, .invalidResponse, literal)
                XCTAssertTrue((error as? FederationError)?.message.contains("Credentials.Expiration") ?? false, "\(error)")
            }
        }
    }

    func testMissingSecretKeyIsAnInvalidResponseNamingTheField() async throws {
        let outcome = try await federateWith(.init(status: 200, body: try Fixtures.bytes("GetCredentialsForIdentity.missing-secret-key")))
        guard case .failure(let error) = outcome else { return XCTFail("expected a failure") }
        XCTAssertEqual(error.code, .invalidResponse)
        XCTAssertTrue(error.message.contains("Credentials.SecretKey"), error.message)
        XCTAssertEqual(error.operation, "GetCredentialsForIdentity")
        XCTAssertEqual(error.httpStatus, 200)
    }

    func testEachMissingCredentialFieldIsNamed() throws {
        let bodies: [(String, [UInt8])] = [
            ("Credentials.AccessKeyId", FakeCognito.credentialsBody(identityId: "i", accessKeyId: nil)),
            ("Credentials.SecretKey", FakeCognito.credentialsBody(identityId: "i", secretKey: nil)),
            ("Credentials.SessionToken", FakeCognito.credentialsBody(identityId: "i", sessionToken: nil)),
            ("Credentials.Expiration", FakeCognito.credentialsBody(identityId: "i", expirationLiteral: nil)),
            ("Credentials", Array(#"{"IdentityId":"i"}"#.utf8)),
        ]
        for (field, body) in bodies {
            XCTAssertThrowsError(
                try CognitoResponseDecoder.decode(GetCredentialsForIdentityOutput.self, from: body, operation: "GetCredentialsForIdentity")
            ) { error in
                let federationError = error as? FederationError
                XCTAssertEqual(federationError?.code, .invalidResponse, field)
                XCTAssertTrue(federationError?.message.contains("'\(field)'") ?? false, "\(field): \(error)")
            }
        }
    }

    func testTruncatedJSONIsAnInvalidResponse() async throws {
        let full = try Fixtures.bytes("GetCredentialsForIdentity.success")
        let outcome = try await federateWith(.init(status: 200, body: Array(full.prefix(full.count / 2))))
        guard case .failure(let error) = outcome else { return XCTFail("expected a failure") }
        XCTAssertEqual(error.code, .invalidResponse)
        XCTAssertEqual(error.operation, "GetCredentialsForIdentity")
    }

    func testEmptyAndNonObjectBodiesAreInvalidResponses() async throws {
        for body in ["", "[]", "null", "<html>ok</html>"] {
            let outcome = try await federateWith(.raw(body: body))
            guard case .failure(let error) = outcome else { XCTFail("expected a failure for \(body)"); continue }
            XCTAssertEqual(error.code, .invalidResponse, body)
        }
    }

    func testGetIdWithoutIdentityIdIsAnInvalidResponse() async throws {
        let harness = try Harness(retry: .none)
        harness.fake.enqueue(.raw(body: "{}"), for: .getId)
        let error = await assertThrows(FederationError.self, code: .invalidResponse) { try await harness.client.federate(token: TestJWT.valid(), provider: .google) }
        XCTAssertTrue(error?.message.contains("IdentityId") ?? false, error?.message ?? "")
        XCTAssertEqual(error?.operation, "GetId")
        XCTAssertEqual(harness.fake.operations, ["GetId"])
    }

    func testGetIdFixture() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.init(status: 200, body: try Fixtures.bytes("GetId.success")), for: .getId)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google)
        XCTAssertEqual(harness.fake.calls(.getCredentialsForIdentity).first?.string("IdentityId"), "us-east-1:e5a2c3b1-7d4f-4a9e-8c21-3f6b9d0a1e55")
    }

    func testCredentialsResponseWithoutIdentityIdKeepsTheRequestedOne() async throws {
        let result = try await federateWith(.init(status: 200, body: FakeCognito.credentialsBody(identityId: nil))).get()
        XCTAssertEqual(result.identityId, "us-east-1:asked")
    }

    func testUnknownFieldsAreIgnored() async throws {
        let body = #"{"IdentityId":"us-east-1:asked","Extra":{"a":1},"Credentials":{"AccessKeyId":"A","SecretKey":"S","SessionToken":"T","Expiration":1700003600,"New":true}}"#
        let result = try await federateWith(.raw(body: body)).get()
        XCTAssertEqual(result.credentials.accessKeyId, "A")
    }

    func testGetOpenIdTokenSendsTheIdentityAndLoginsAndDecodesTheFixture() async throws {
        let fake = FakeCognito()
        fake.enqueue(.init(status: 200, body: try Fixtures.bytes("GetOpenIdToken.success")), for: .getOpenIdToken)
        let client = CognitoIdentityClient(endpoint: testEndpoint, transport: fake.transport, limits: HTTPLimits(), retry: noSleepRunner())
        let output = try await client.getOpenIdToken(
            identityId: "us-east-1:e5a2c3b1-7d4f-4a9e-8c21-3f6b9d0a1e55", logins: ["accounts.google.com": "tok"],
            deadline: .now + .seconds(10), logger: Logger(label: "noop", factory: { _ in SwiftLogNoOpLogHandler() }))
        XCTAssertEqual(output.identityId, "us-east-1:e5a2c3b1-7d4f-4a9e-8c21-3f6b9d0a1e55")
        XCTAssertTrue(output.token.hasPrefix("eyJ"))
        let call = try XCTUnwrap(fake.calls.first)
        XCTAssertEqual(call.header("X-Amz-Target"), "AWSCognitoIdentityService.GetOpenIdToken")
        XCTAssertEqual(call.string("IdentityId"), "us-east-1:e5a2c3b1-7d4f-4a9e-8c21-3f6b9d0a1e55")
        XCTAssertEqual(call.logins, ["accounts.google.com": "tok"])
    }
}
