import BrokerTestSupport
import Federation
import Foundation
import XCTest

/// The classic flow through libcurl to the loopback server: canned STS XML answers
/// and faults (errors of every documented type, malformed, truncated, oversize bodies,
/// retried IDPCommunicationError and throttling).
final class ReliabilitySTSTests: ReliabilityTestCase {
    private let classic = FederationOptions(flow: .classic(ClassicFlowOptions(roleArn: "arn:aws:iam::123456789012:role/ClassicRole")))

    private func classicClient(_ cognito: FakeCognito, configure: (inout FederationConfiguration) -> Void = { _ in }) throws -> FederationClient {
        try makeClient(cognito) { configuration in
            configuration.stsEndpoint = cognito.endpoint
            configure(&configuration)
        }
    }

    private func xml(status: Int = 200, _ text: String) -> ScriptedResponse {
        .respond(status: status, headers: [("Content-Type", "text/xml")], text: text)
    }

    private func stsError(_ code: String, status: Int = 400, message: String = "scripted") -> ScriptedResponse {
        xml(status: status, FakeCognito.stsErrorBody(code: code, message: message))
    }

    /// Federates `alice` with the classic flow, expecting `code`; the previous session stays.
    @discardableResult
    private func classicExpectingError(
        _ client: FederationClient, _ code: FederationError.Code, token: String? = nil, file: StaticString = #filePath, line: UInt = #line
    ) async -> FederationError? {
        await assertThrows(FederationError.self, code: code, file: file, line: line) {
            try await client.federate(token: token ?? TestJWT.valid(), provider: .google, options: classic, session: "alice")
        }
    }

    func testClassicFlowOverLibcurl() async throws {
        let cognito = try makeCognito()
        let client = try classicClient(cognito)
        let result = try await client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        XCTAssertEqual(cognito.operations, ["GetId", "GetOpenIdToken", "AssumeRoleWithWebIdentity"])
        XCTAssertTrue(result.credentials.accessKeyId.hasPrefix("ASIASTSFAKEACCESS"))
        XCTAssertEqual(result.assumedRoleArn, "arn:aws:sts::123456789012:assumed-role/ClassicRole/alice")
        XCTAssertEqual(result.webIdentitySubject, FakeCognito.defaultIdentityId)
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.credentials, result.credentials)
    }

    func testEveryDocumentedErrorIsTypedAndLeavesTheSessionIntact() async throws {
        let cases: [(String, Int, FederationError.Code)] = [
            ("AccessDenied", 403, .notAuthorized),
            ("IDPRejectedClaim", 403, .notAuthorized),
            ("InvalidIdentityToken", 400, .notAuthorized),
            ("ExpiredTokenException", 400, .notAuthorized),
            ("MalformedPolicyDocument", 400, .invalidParameter),
            ("PackedPolicyTooLarge", 400, .invalidParameter),
            ("RegionDisabledException", 403, .regionDisabled),
            ("BrandNewStsException", 400, .serviceError),
        ]
        let cognito = try makeCognito()
        let client = try classicClient(cognito)
        try await client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        let previous = try await client.session("alice")
        for (type, status, code) in cases {
            cognito.resetRecording()
            cognito.enqueue(stsError(type, status: status, message: "scripted \(type)"), for: .assumeRoleWithWebIdentity)
            let error = await classicExpectingError(client, code)
            XCTAssertEqual(error?.serviceErrorType, type)
            XCTAssertEqual(error?.serviceMessage, "scripted \(type)")
            XCTAssertEqual(error?.httpStatus, status)
            XCTAssertEqual(cognito.count(.assumeRoleWithWebIdentity), 1, "\(type) is not retried")
            try await assertIntact(client, previous)
        }
    }

    func testIDPCommunicationErrorIsRetried() async throws {
        let cognito = try makeCognito()
        let client = try classicClient(cognito)
        cognito.enqueue(stsError("IDPCommunicationError"), stsError("IDPCommunicationError"), for: .assumeRoleWithWebIdentity)
        try await client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        XCTAssertEqual(cognito.count(.assumeRoleWithWebIdentity), 3)

        cognito.resetRecording()
        cognito.setDefault(stsError("IDPCommunicationError"), for: .assumeRoleWithWebIdentity)
        await classicExpectingError(client, .externalService)
        XCTAssertEqual(cognito.count(.assumeRoleWithWebIdentity), 3, "retried until the attempts ran out")
    }

    func testThrottlingAndServerErrorsAreRetried() async throws {
        let cognito = try makeCognito()
        let client = try classicClient(cognito)
        cognito.enqueue(stsError("Throttling", message: "Rate exceeded"), stsError("InternalFailure", status: 500), for: .assumeRoleWithWebIdentity)
        try await client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        XCTAssertEqual(cognito.count(.assumeRoleWithWebIdentity), 3)

        cognito.resetRecording()
        cognito.setDefault(stsError("Throttling", message: "Rate exceeded"), for: .assumeRoleWithWebIdentity)
        await classicExpectingError(client, .throttled)
        XCTAssertEqual(cognito.count(.assumeRoleWithWebIdentity), 3)
    }

    func testMalformedTruncatedAndOversizeBodiesAreInvalidResponses() async throws {
        let cognito = try makeCognito()
        let client = try classicClient(cognito) { $0.maxResponseBytes = 64 * 1024 }
        let complete = FakeCognito.assumedRoleBody(accessKeyId: "ASIACUT", expirationLiteral: FakeCognito.iso8601(Date().addingTimeInterval(3600)))
        let cases: [(ScriptedResponse, String)] = [
            (xml("<AssumeRoleWithWebIdentityResponse><Oops></AssumeRoleWithWebIdentityResponse>"), "malformed XML"),
            (xml(String(complete.prefix(complete.utf8.count * 2 / 3))), "truncated XML inside 'AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult"),
            (xml(complete.replacingOccurrences(of: "SessionToken>", with: "Token>")), "'AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/Credentials/SessionToken'"),
            (xml("{\"json\":true}"), "malformed XML"),
            (.oversize(headers: [("Content-Type", "text/xml")], byteCount: 1 << 20), "larger than the response cap"),
            (.oversize(byteCount: 1 << 20, chunked: true), "larger than the response cap"),
        ]
        for (response, phrase) in cases {
            cognito.resetRecording()
            cognito.enqueue(response, for: .assumeRoleWithWebIdentity)
            let error = await classicExpectingError(client, .invalidResponse)
            XCTAssertTrue(error?.message.contains(phrase) == true, "\(phrase): \(String(describing: error))")
            XCTAssertEqual(error?.operation, "AssumeRoleWithWebIdentity")
            XCTAssertEqual(cognito.count(.assumeRoleWithWebIdentity), 1, "not retried")
            try await assertNotFederated(client, session: "alice")
        }
        // A body cut by the connection (declared longer than sent) is a network failure, retried.
        cognito.resetRecording()
        let bytes = Array(complete.utf8)
        cognito.enqueue(.truncated(headers: [("Content-Type", "text/xml")], declaredLength: bytes.count, body: Array(bytes.prefix(100))), for: .assumeRoleWithWebIdentity)
        try await client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        XCTAssertEqual(cognito.count(.assumeRoleWithWebIdentity), 2)
    }

    func testEchoedTokensNeverReachAnError() async throws {
        let cognito = try makeCognito()
        let client = try classicClient(cognito)
        let token = TestJWT.valid(sub: "echo-subject")
        var secrets: [String] = [token, FakeCognito.openIdToken]
        secrets += token.split(separator: ".").map(String.init)
        secrets += FakeCognito.openIdToken.split(separator: ".").map(String.init).filter { $0.count >= 16 }
        cognito.enqueue(
            stsError("InvalidIdentityToken", message: "token \(FakeCognito.openIdToken.lowercased()) for \(token.suffix(60)) is invalid"),
            for: .assumeRoleWithWebIdentity)
        let error = await classicExpectingError(client, .notAuthorized, token: token)
        var dumped = ""
        dump(error, to: &dumped)
        XCTAssertNil(leakedRun(in: dumped, of: secrets), dumped)
        XCTAssertTrue(error?.serviceMessage?.contains("<redacted>") == true)
    }
}
