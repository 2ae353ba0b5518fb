import BrokerTestSupport
import Federation
import Foundation
import XCTest

/// Answers that arrive whole but cannot be trusted: bodies over the cap,
/// malformed, truncated or incomplete JSON, and the wrong content type. None is
/// retried (the same server would answer the same), none touches the session.
final class ReliabilityHostileResponseTests: ReliabilityTestCase {
    // MARK: Over the cap

    func testAnnouncedOverCapBodyIsInvalidResponseWithoutRetry() async throws {
        try await assertOverCap(.oversize(headers: [("Content-Type", "application/x-amz-json-1.1")], byteCount: 8 << 20))
    }

    func testUnannouncedOverCapBodyIsInvalidResponseWithoutRetry() async throws {
        try await assertOverCap(.oversize(byteCount: 8 << 20, chunked: true))
    }

    func testOverCapErrorBodyIsInvalidResponseWithoutRetry() async throws {
        try await assertOverCap(.oversize(status: 503, byteCount: 8 << 20, chunked: true))
    }

    func testBodyAtTheCapIsAccepted() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) { $0.maxResponseBytes = 4096 }
        let json = #"{"IdentityId":"\#(FakeCognito.defaultIdentityId)","Padding":""#
        let padded = json + String(repeating: "x", count: 4096 - json.utf8.count - 2) + #""}"#
        XCTAssertEqual(padded.utf8.count, 4096)
        cognito.enqueue(.json(padded), for: .getId)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        XCTAssertEqual(cognito.operations, ["GetId", "GetCredentialsForIdentity"])
    }

    // MARK: Bad JSON on 200

    func testMissingFieldIsInvalidResponseNamingIt() async throws {
        try await assertInvalid(
            .json(String(decoding: try Fixtures.bytes("GetCredentialsForIdentity.missing-secret-key"), as: UTF8.self)),
            naming: "'Credentials.SecretKey'")
        try await assertInvalid(.json(#"{"IdentityId":"x"}"#), naming: "'Credentials'")
    }

    func testIncompleteJSONIsInvalidResponse() async throws {
        let complete = FakeCognito.credentialsJSON(
            identityId: FakeCognito.defaultIdentityId, accessKeyId: "ASIACUT", expiration: Date().addingTimeInterval(3600))
        // A complete HTTP response whose JSON stops half-way.
        try await assertInvalid(.json(String(complete.prefix(complete.count / 2))), naming: "malformed or truncated JSON")
    }

    func testMalformedJSONIsInvalidResponse() async throws {
        try await assertInvalid(.json("{\"IdentityId\": us-east-1}"), naming: "malformed or truncated JSON")
        try await assertInvalid(.respond(text: ""), naming: "malformed or truncated JSON")
        try await assertInvalid(.json("[1,2,3]"), naming: "not a JSON object")
    }

    func testWrongTypesAndNullsAreInvalidResponseNamingTheField() async throws {
        let expiry = Int64(Date().addingTimeInterval(3600).timeIntervalSince1970)
        try await assertInvalid(
            .json(#"{"Credentials":{"AccessKeyId":1,"SecretKey":"s","SessionToken":"t","Expiration":\#(expiry)}}"#),
            naming: "'Credentials.AccessKeyId' with the wrong type")
        try await assertInvalid(
            .json(#"{"Credentials":{"AccessKeyId":"a","SecretKey":null,"SessionToken":"t","Expiration":\#(expiry)}}"#),
            naming: "null for the field 'Credentials.SecretKey'")
        try await assertInvalid(
            .json(#"{"Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t","Expiration":"soon"}}"#),
            naming: "bad value in the field 'Credentials.Expiration'")
        try await assertInvalid(
            .json(#"{"Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t","Expiration":1e400}}"#),
            naming: "Credentials.Expiration")
    }

    func testEmptyRequiredStringsAreInvalidResponseNamingTheField() async throws {
        // Found by the fuzzer: `{"IdentityId":""}` used to be accepted.
        let expiry = Int64(Date().addingTimeInterval(3600).timeIntervalSince1970)
        try await assertInvalid(
            .json(#"{"Credentials":{"AccessKeyId":"a","SecretKey":"","SessionToken":"t","Expiration":\#(expiry)}}"#),
            naming: "bad value in the field 'Credentials.SecretKey'")
        try await assertInvalid(
            .json(#"{"IdentityId":"","Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t","Expiration":\#(expiry)}}"#),
            naming: "bad value in the field 'IdentityId'")
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        cognito.setDefault(.json(#"{"IdentityId":""}"#), for: .getId)
        let error = await federateExpectingError(client, session: "bob", .invalidResponse)
        XCTAssertTrue(error?.message.contains("bad value in the field 'IdentityId'") == true, error?.message ?? "")
        XCTAssertEqual(cognito.operations, ["GetId"])
        try await assertNotFederated(client, session: "bob")
    }

    /// Fields no AWS service sends: a line break in the identity ID would forge a log line
    /// (it is logged and printed), one in a credential an output field; a megabyte-long one
    /// would be stored and sent again. Refused, the session intact, and never quoted.
    func testAnIdentityIDOrCredentialNoAWSServiceSendsIsInvalidResponse() async throws {
        let expiry = Int64(Date().addingTimeInterval(3600).timeIntervalSince1970)
        func body(identity: String = FakeCognito.defaultIdentityId, key: String = "ASIAFAKE", secret: String = "s3cr3t", token: String = "t0k3n") -> String {
            #"{"IdentityId":"\#(identity)","Credentials":{"AccessKeyId":"\#(key)","SecretKey":"\#(secret)","SessionToken":"\#(token)","Expiration":\#(expiry)}}"#
        }
        // JSON escapes: the decoded values hold a line break and an escape character.
        let forged = #"us-east-1:1\n2026-11-29 level=info msg=admin-login-ok"#
        for (response, field) in [
            (body(identity: forged), "identity ID"), (body(identity: String(repeating: "a", count: 129)), "identity ID"),
            (body(identity: "us-east-1:x level=error msg=forged"), "identity ID"),
            (body(key: #"ASIA\tFAKE"#), "access key ID"), (body(secret: #"s3cr3t\u001b[2J"#), "secret access key"),
            (body(token: #"t0k3n\nAWS_SECRET_ACCESS_KEY=planted"#), "session token"),
        ] {
            let cognito = try makeCognito()
            let client = try makeClient(cognito)
            let previous = try await establishGoodSession(client, cognito)
            cognito.setDefault(.json(response), for: .getCredentialsForIdentity)
            let error = await federateExpectingError(client, .invalidResponse)
            XCTAssertTrue(error?.message.contains(field) == true, "\(error?.message ?? "nil") lacks \(field)")
            for fragment in ["admin-login-ok", "planted", "s3cr3t", "t0k3n"] {
                XCTAssertFalse(error?.description.contains(fragment) == true, "the error quotes the field: \(String(describing: error))")
            }
            try await assertIntact(client, previous)
        }
    }

    func testInvalidResponseOnGetIdForAFreshSession() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        cognito.setDefault(.json(#"{"IdentityID":"wrong-case"}"#), for: .getId)
        let error = await federateExpectingError(client, session: "bob", .invalidResponse)
        XCTAssertTrue(error?.message.contains("'IdentityId'") == true, error?.message ?? "")
        XCTAssertEqual(cognito.operations, ["GetId"])
        try await assertNotFederated(client, session: "bob")
    }

    // MARK: Content type

    func testWrongContentTypeWithAJSONBodyIsAccepted() async throws {
        for contentType in ["text/html; charset=utf-8", "application/json", "text/plain", "application/octet-stream"] {
            let cognito = try makeCognito()
            let client = try makeClient(cognito)
            let previous = try await establishGoodSession(client, cognito)
            let body = FakeCognito.credentialsJSON(
                identityId: FakeCognito.defaultIdentityId, accessKeyId: "ASIAHTML", expiration: Date().addingTimeInterval(3600))
            cognito.enqueue(.json(body, contentType: contentType), for: .getCredentialsForIdentity)
            let result = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
            XCTAssertEqual(result.credentials.accessKeyId, "ASIAHTML", contentType)
            XCTAssertEqual(cognito.count(.getCredentialsForIdentity), 1, contentType)
            let snapshot = try await client.session("alice")
            XCTAssertEqual(snapshot.credentials?.accessKeyId, "ASIAHTML", contentType)
            XCTAssertNotEqual(snapshot.credentials, previous.credentials)
        }
    }

    func testNoContentTypeWithAJSONBodyIsAccepted() async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        cognito.enqueue(.respond(text: #"{"IdentityId":"\#(FakeCognito.defaultIdentityId)"}"#), for: .getId)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        let snapshot = try await client.session("bob")
        XCTAssertEqual(snapshot.state, .federated)
    }

    // MARK: Helpers

    /// `response` to every GetCredentialsForIdentity call after a good session:
    /// invalidResponse naming `fragment`, one attempt, previous session intact.
    private func assertInvalid(
        _ response: ScriptedResponse,
        naming fragment: String,
        file: StaticString = #filePath,
        line: UInt = #line
    ) async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito)
        let previous = try await establishGoodSession(client, cognito, file: file, line: line)
        cognito.setDefault(response, for: .getCredentialsForIdentity)
        let error = await federateExpectingError(client, .invalidResponse, file: file, line: line)
        XCTAssertTrue(error?.message.contains(fragment) == true, "\(error?.message ?? "nil") lacks \(fragment)", file: file, line: line)
        XCTAssertEqual(error?.operation, "GetCredentialsForIdentity", file: file, line: line)
        XCTAssertEqual(cognito.operations, ["GetCredentialsForIdentity"], file: file, line: line)
        try await assertIntact(client, previous, file: file, line: line)
    }

    /// `response` (bigger than the 4 KiB cap) to GetCredentialsForIdentity:
    /// invalidResponse, one attempt, previous session intact.
    private func assertOverCap(_ response: ScriptedResponse, file: StaticString = #filePath, line: UInt = #line) async throws {
        let cognito = try makeCognito()
        let client = try makeClient(cognito) { $0.maxResponseBytes = 4096 }
        let previous = try await establishGoodSession(client, cognito, file: file, line: line)
        cognito.setDefault(response, for: .getCredentialsForIdentity)
        let start = ContinuousClock.now
        let error = await federateExpectingError(client, .invalidResponse, file: file, line: line)
        XCTAssertLessThan(start.duration(to: .now), .seconds(10), "returns promptly", file: file, line: line)
        XCTAssertTrue(error?.message.contains("response cap") == true, error?.message ?? "", file: file, line: line)
        XCTAssertNotNil(error?.curlCode, file: file, line: line)
        XCTAssertEqual(cognito.operations, ["GetCredentialsForIdentity"], file: file, line: line)
        try await assertIntact(client, previous, file: file, line: line)
    }
}
