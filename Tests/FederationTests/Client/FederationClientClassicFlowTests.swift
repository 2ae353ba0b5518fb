import BrokerTestSupport
@testable import Federation
import Foundation
import InMemoryLogging
import Logging
import SecureStorage
import XCTest

/// The classic flow through the injected fake: GetOpenIdToken, then STS
/// AssumeRoleWithWebIdentity, plugged in as the credentials step of a federation.
final class FederationClientClassicFlowTests: XCTestCase {
    static let roleArn = "arn:aws:iam::123456789012:role/ClassicRole"
    private let classic = FederationOptions(flow: .classic(ClassicFlowOptions(roleArn: FederationClientClassicFlowTests.roleArn)))

    func testEnhancedStaysTheDefaultAndNeverCallsSTS() async throws {
        let harness = try Harness()
        XCTAssertEqual(FederationOptions().flow, .enhanced)
        let result = try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetCredentialsForIdentity"])
        XCTAssertNil(result.assumedRoleArn)
        XCTAssertNil(result.webIdentitySubject)
    }

    func testClassicLoginCallsGetIdThenGetOpenIdTokenThenAssumeRole() async throws {
        let harness = try Harness()
        let token = TestJWT.valid()
        let result = try await harness.client.federate(token: token, provider: .google, options: classic, session: "alice")
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetOpenIdToken", "AssumeRoleWithWebIdentity"])
        let openId = try XCTUnwrap(harness.fake.calls(.getOpenIdToken).first)
        XCTAssertEqual(openId.string("IdentityId"), FakeCognito.defaultIdentityId)
        XCTAssertEqual(openId.logins, ["accounts.google.com": token])

        let sts = try XCTUnwrap(harness.fake.calls(.assumeRoleWithWebIdentity).first)
        XCTAssertEqual(sts.method, "POST")
        XCTAssertEqual(sts.url, "https://sts.us-east-1.amazonaws.com/", "the regional endpoint from the pool's region")
        XCTAssertNil(sts.header("X-Amz-Target"))
        XCTAssertNil(sts.header("Authorization"), "AssumeRoleWithWebIdentity is unsigned")
        XCTAssertEqual(sts.header("Content-Type"), "application/x-www-form-urlencoded; charset=utf-8")
        XCTAssertEqual(sts.form.map(\.name), ["Action", "Version", "RoleArn", "RoleSessionName", "WebIdentityToken"])
        XCTAssertEqual(sts.formValue("Action"), "AssumeRoleWithWebIdentity")
        XCTAssertEqual(sts.formValue("Version"), "2011-06-15")
        XCTAssertEqual(sts.formValue("RoleArn"), Self.roleArn)
        XCTAssertEqual(sts.formValue("RoleSessionName"), "alice")
        XCTAssertEqual(sts.formValue("WebIdentityToken"), FakeCognito.openIdToken, "the Cognito OpenID token, not the provider token")

        XCTAssertEqual(result.identityId, FakeCognito.defaultIdentityId)
        XCTAssertEqual(result.credentials.accessKeyId, "ASIASTSFAKEACCESS001")
        XCTAssertEqual(result.credentials.secretAccessKey, FakeCognito.stsSecretKey)
        XCTAssertEqual(result.credentials.sessionToken, FakeCognito.stsSessionToken)
        XCTAssertEqual(result.credentials.expiration.timeIntervalSince1970, testEpoch.addingTimeInterval(3600).timeIntervalSince1970, accuracy: 0.01)
        XCTAssertEqual(result.assumedRoleArn, "arn:aws:sts::123456789012:assumed-role/ClassicRole/alice")
        XCTAssertEqual(result.webIdentitySubject, FakeCognito.defaultIdentityId)

        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.provider, .google)
        XCTAssertEqual(snapshot.credentials?.accessKeyId, "ASIASTSFAKEACCESS001")
    }

    func testEveryOptionIsSentPercentEncoded() async throws {
        let harness = try Harness()
        let policy = #"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/a b+c~"}]}"#
        let options = FederationOptions(flow: .classic(ClassicFlowOptions(
            roleArn: Self.roleArn, roleSessionName: "custom.name@x", durationSeconds: 900, sessionPolicy: policy,
            managedPolicyArns: ["arn:aws:iam::aws:policy/ReadOnlyAccess", "arn:aws:iam::123456789012:policy/Narrow"])))
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: options, session: "alice")
        let sts = try XCTUnwrap(harness.fake.calls(.assumeRoleWithWebIdentity).first)
        XCTAssertEqual(sts.form.map(\.name), [
            "Action", "Version", "RoleArn", "RoleSessionName", "WebIdentityToken", "DurationSeconds", "Policy",
            "PolicyArns.member.1.arn", "PolicyArns.member.2.arn",
        ])
        XCTAssertEqual(sts.formValue("RoleSessionName"), "custom.name@x")
        XCTAssertEqual(sts.formValue("DurationSeconds"), "900")
        XCTAssertEqual(sts.formValue("Policy"), policy)
        XCTAssertEqual(sts.formValue("PolicyArns.member.2.arn"), "arn:aws:iam::123456789012:policy/Narrow")
        // AWS's encoding: nothing but unreserved characters raw, %20 for a space, upper-case hex.
        XCTAssertTrue(sts.bodyText.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2FClassicRole"), sts.bodyText)
        XCTAssertTrue(sts.bodyText.contains("custom.name%40x"), sts.bodyText)
        XCTAssertTrue(sts.bodyText.contains("b%2Fa%20b%2Bc~"), sts.bodyText)
        XCTAssertFalse(sts.bodyText.contains("+"))
        XCTAssertTrue(sts.bodyText.allSatisfy { $0.isASCII && !$0.isWhitespace })
    }

    func testQueryEncodingMatchesAWSPercentEncoding() {
        XCTAssertEqual(STSQuery.percentEncoded("a-z_0.9~"), "a-z_0.9~")
        XCTAssertEqual(STSQuery.percentEncoded("a b+c/d=e&f"), "a%20b%2Bc%2Fd%3De%26f")
        XCTAssertEqual(STSQuery.percentEncoded("é"), "%C3%A9")
        var query = STSQuery(action: "AssumeRoleWithWebIdentity")
        query.append("Policy", nil as String?)
        XCTAssertEqual(String(decoding: query.body, as: UTF8.self), "Action=AssumeRoleWithWebIdentity&Version=2011-06-15")
    }

    func testKnownIdentityIsReusedAndGetIdSkipped() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        harness.fake.resetRecording()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        XCTAssertEqual(harness.fake.operations, ["GetOpenIdToken", "AssumeRoleWithWebIdentity"])
    }

    func testCachedIdentityRejectedByCognitoAsksGetIdOnce() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        harness.fake.resetRecording()
        harness.fake.enqueue(.error("NotAuthorizedException", message: "Invalid login token. Not a valid OpenId Connect identity token."), for: .getOpenIdToken)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        XCTAssertEqual(harness.fake.operations, ["GetOpenIdToken", "GetId", "GetOpenIdToken", "AssumeRoleWithWebIdentity"])
    }

    func testSTSRefusalDoesNotDropTheCachedIdentity() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        let before = try await harness.client.session("alice")
        harness.fake.resetRecording()
        harness.fake.enqueue(.stsError("AccessDenied", message: "Not authorized to perform sts:AssumeRoleWithWebIdentity", status: 403), for: .assumeRoleWithWebIdentity)
        let error = await assertThrows(FederationError.self, code: .notAuthorized) {
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: self.classic, session: "alice")
        }
        XCTAssertEqual(error?.operation, "AssumeRoleWithWebIdentity")
        XCTAssertEqual(error?.serviceErrorType, "AccessDenied")
        XCTAssertEqual(error?.httpStatus, 403)
        XCTAssertEqual(harness.fake.operations, ["GetOpenIdToken", "AssumeRoleWithWebIdentity"], "STS refusing the role says nothing about the identity ID")
        let after = try await harness.client.session("alice")
        XCTAssertEqual(after, before, "the previous session stays intact")
    }

    func testGetOpenIdTokenResourceNotFoundTerminatesTheSession() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        harness.fake.setDefault(.error("ResourceNotFoundException", message: "Identity 'x' not found."), for: .getOpenIdToken)
        await assertThrows(FederationError.self, code: .identityTerminated) {
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: self.classic, session: "alice")
        }
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .terminated)
    }

    func testGuestClassicFlowHasNoLoginsAndKeepsItsIdentity() async throws {
        let harness = try Harness()
        let first = try await harness.client.federateAsGuest(options: classic, session: "guest")
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetOpenIdToken", "AssumeRoleWithWebIdentity"])
        XCTAssertNil(harness.fake.calls(.getId).first?.logins)
        XCTAssertNil(harness.fake.calls(.getOpenIdToken).first?.logins)
        XCTAssertNotNil(first.assumedRoleArn)
        harness.fake.resetRecording()
        try await harness.client.federateAsGuest(options: classic, session: "guest")
        XCTAssertEqual(harness.fake.operations, ["GetOpenIdToken", "AssumeRoleWithWebIdentity"], "the guest identity is reused")
        let snapshot = try await harness.client.session("guest")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertNil(snapshot.provider)
    }

    func testGuestRejectsEnhancedOnlyOptions() async throws {
        let harness = try Harness()
        await assertThrows(FederationError.self, code: .invalidConfiguration) {
            try await harness.client.federateAsGuest(options: FederationOptions(customRoleArn: Self.roleArn), session: "guest")
        }
        XCTAssertTrue(harness.fake.calls.isEmpty)
    }

    func testDeveloperIdentityClassicFlowSkipsGetId() async throws {
        let harness = try Harness()
        let developerToken = TestJWT.make(sub: "us-east-1:dddddddd-0000-0000-0000-000000000001", exp: testEpoch.addingTimeInterval(3600), iss: "https://cognito-identity.amazonaws.com")
        try await harness.client.federate(token: developerToken, provider: .developer, options: classic, session: "dev")
        XCTAssertEqual(harness.fake.operations, ["GetOpenIdToken", "AssumeRoleWithWebIdentity"], "a developer token never goes to GetId")
        let call = try XCTUnwrap(harness.fake.calls(.getOpenIdToken).first)
        XCTAssertEqual(call.string("IdentityId"), "us-east-1:dddddddd-0000-0000-0000-000000000001")
        XCTAssertEqual(call.logins, ["cognito-identity.amazonaws.com": developerToken])

        harness.fake.resetRecording()
        let withId = FederationOptions(developerProvidedIdentityId: "us-east-1:eeeeeeee-0000-0000-0000-000000000002", flow: classic.flow)
        try await harness.client.federate(token: "opaque-developer-token-value", provider: .developer, options: withId, session: "dev2")
        XCTAssertEqual(harness.fake.operations, ["GetOpenIdToken", "AssumeRoleWithWebIdentity"])
        XCTAssertEqual(harness.fake.calls(.getOpenIdToken).first?.string("IdentityId"), "us-east-1:eeeeeeee-0000-0000-0000-000000000002")
    }

    func testLocalChecksFailBeforeAnyRequest() async throws {
        let harness = try Harness()
        let bad: [ClassicFlowOptions] = [
            ClassicFlowOptions(roleArn: ""),
            ClassicFlowOptions(roleArn: "ClassicRole"),
            ClassicFlowOptions(roleArn: "arn:aws:iam::123456789012:user/alice"),
            ClassicFlowOptions(roleArn: Self.roleArn, durationSeconds: 899),
            ClassicFlowOptions(roleArn: Self.roleArn, durationSeconds: 43_201),
            ClassicFlowOptions(roleArn: Self.roleArn, roleSessionName: "a"),
            ClassicFlowOptions(roleArn: Self.roleArn, roleSessionName: "has space"),
            ClassicFlowOptions(roleArn: Self.roleArn, roleSessionName: String(repeating: "x", count: 65)),
            ClassicFlowOptions(roleArn: Self.roleArn, sessionPolicy: "  "),
            ClassicFlowOptions(roleArn: Self.roleArn, sessionPolicy: "Allow s3:GetObject"),
            ClassicFlowOptions(roleArn: Self.roleArn, sessionPolicy: #"{"Version": "2012-10-17""#),
            ClassicFlowOptions(roleArn: Self.roleArn, sessionPolicy: #"{"Version": "2012-10-17"} {}"#),
            ClassicFlowOptions(roleArn: Self.roleArn, sessionPolicy: #"[{"Effect": "Allow"}]"#),
            // UTF-16 read from bytes that were also UTF-8, and a byte order mark.
            ClassicFlowOptions(roleArn: Self.roleArn, sessionPolicy: "{\0}\0"),
            ClassicFlowOptions(roleArn: Self.roleArn, sessionPolicy: "\u{FEFF}{}"),
            ClassicFlowOptions(roleArn: Self.roleArn, managedPolicyArns: Array(repeating: "arn:aws:iam::aws:policy/P", count: 11)),
            ClassicFlowOptions(roleArn: Self.roleArn, managedPolicyArns: ["ReadOnlyAccess"]),
        ]
        for options in bad {
            await assertThrows(FederationError.self, code: .invalidConfiguration) {
                try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: FederationOptions(flow: .classic(options)), session: "alice")
            }
            await assertThrows(FederationError.self, code: .invalidConfiguration) {
                try await harness.client.federateAsGuest(options: FederationOptions(flow: .classic(options)), session: "g")
            }
        }
        await assertThrows(FederationError.self, code: .invalidConfiguration) {
            try await harness.client.federate(
                token: TestJWT.valid(), provider: .google,
                options: FederationOptions(customRoleArn: Self.roleArn, flow: self.classic.flow), session: "alice")
        }
        XCTAssertTrue(harness.fake.calls.isEmpty, "nothing was sent")
        // The limits themselves are accepted.
        for duration in [900, 43_200] {
            let options = FederationOptions(flow: .classic(ClassicFlowOptions(roleArn: Self.roleArn, roleSessionName: "ab", durationSeconds: duration)))
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: options, session: "alice")
        }
    }

    func testRoleSessionNameIsDerivedDeterministically() {
        XCTAssertEqual(RoleSessionName.derived(from: "alice"), "alice")
        XCTAssertEqual(RoleSessionName.derived(from: "a"), "a_")
        XCTAssertEqual(RoleSessionName.derived(from: "tenant:alice"), "tenant_alice")
        XCTAssertEqual(RoleSessionName.derived(from: "u.s-e_r@x+y=z,w"), "u.s-e_r@x+y=z,w")
        let long = String(repeating: "a", count: 100)
        let derived = RoleSessionName.derived(from: long)
        XCTAssertEqual(derived.count, 64)
        // The same in every process and release (CloudTrail shows it): FNV-1a of the name,
        // pinned (a per-process seeded hash would pass a comparison made in one process).
        XCTAssertEqual(derived, String(repeating: "a", count: 55) + "-0a0bb1d9", "deterministic, the hash padded to 8 digits")
        XCTAssertNotEqual(derived, RoleSessionName.derived(from: long + "b"), "long names sharing a prefix stay apart")
        XCTAssertTrue(derived.hasPrefix(String(repeating: "a", count: 55) + "-"))
        for name in ["alice", "a", "tenant:alice", long, String(repeating: ":", count: 128), "x@y"] {
            XCTAssertTrue(RoleSessionName.isValid(RoleSessionName.derived(from: name)), name)
        }
    }

    func testDerivedRoleSessionNameIsSent() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "tenant:b")
        XCTAssertEqual(harness.fake.calls(.assumeRoleWithWebIdentity).first?.formValue("RoleSessionName"), "tenant_b")
    }

    func testSTSEndpointPrecedence() async throws {
        func stsURL(configure: (inout FederationConfiguration) -> Void = { _ in }, environment: [String: String]) async throws -> String? {
            let harness = try Harness(configure: configure, environment: environment)
            try await harness.client.federateAsGuest(options: classic, session: "g")
            return harness.fake.calls(.assumeRoleWithWebIdentity).first?.url
        }
        let all = ["AWS_ENDPOINT_URL_STS": "http://127.0.0.1:1/sts", "AWS_ENDPOINT_URL": "http://127.0.0.1:2/all"]
        let configured = try await stsURL(configure: { $0.stsEndpoint = "http://127.0.0.1:3/explicit" }, environment: all)
        XCTAssertEqual(configured, "http://127.0.0.1:3/explicit")
        let fromSTSVariable = try await stsURL(environment: all)
        XCTAssertEqual(fromSTSVariable, "http://127.0.0.1:1/sts")
        let fromGeneral = try await stsURL(environment: ["AWS_ENDPOINT_URL": "http://127.0.0.1:2/all"])
        XCTAssertEqual(fromGeneral, "http://127.0.0.1:2/all")
        let china = try await stsURL(configure: { $0.region = "cn-north-1" }, environment: [:])
        XCTAssertEqual(china, "https://sts.cn-north-1.amazonaws.com.cn/")
        let regional = try await stsURL(configure: { $0.region = "eu-west-3" }, environment: [:])
        XCTAssertEqual(regional, "https://sts.eu-west-3.amazonaws.com/")
    }

    func testPlaintextSTSEndpointToANonLoopbackHostIsRefused() async throws {
        let harness = try Harness(environment: ["AWS_ENDPOINT_URL_STS": "http://sts.example.com/"])
        // The enhanced flow is unaffected by a bad STS endpoint.
        try await harness.client.federateAsGuest(session: "enhanced")
        harness.fake.resetRecording()
        let error = await assertThrows(FederationError.self, code: .invalidConfiguration) {
            try await harness.client.federateAsGuest(options: self.classic, session: "g")
        }
        XCTAssertTrue(error?.message.contains("AWS_ENDPOINT_URL_STS") == true, "\(String(describing: error))")
        XCTAssertTrue(harness.fake.calls.isEmpty)
        let optedIn = try Harness(configure: { $0.allowInsecureEndpoint = true; $0.stsEndpoint = "http://sts.example.com/" })
        try await optedIn.client.federateAsGuest(options: classic, session: "g")
        XCTAssertEqual(optedIn.fake.calls(.assumeRoleWithWebIdentity).first?.url, "http://sts.example.com/")
    }

    func testSTSErrorsAreTyped() async throws {
        let cases: [(code: String, status: Int, expected: FederationError.Code)] = [
            ("AccessDenied", 403, .notAuthorized),
            ("IDPRejectedClaim", 403, .notAuthorized),
            ("InvalidIdentityToken", 400, .notAuthorized),
            ("ExpiredTokenException", 400, .notAuthorized),
            ("MalformedPolicyDocument", 400, .invalidParameter),
            ("PackedPolicyTooLarge", 400, .invalidParameter),
            ("RegionDisabledException", 403, .regionDisabled),
            ("Throttling", 400, .throttled),
            ("IDPCommunicationError", 400, .externalService),
            ("InternalFailure", 500, .serviceUnavailable),
            ("SomethingNewException", 400, .serviceError),
        ]
        for (code, status, expected) in cases {
            let harness = try Harness(retry: RetryPolicy(maxAttempts: 1))
            harness.fake.setDefault(.stsError(code, message: "scripted \(code)", status: status), for: .assumeRoleWithWebIdentity)
            let error = await assertThrows(FederationError.self, code: expected) {
                try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: self.classic, session: "alice")
            }
            XCTAssertEqual(error?.serviceErrorType, code)
            XCTAssertEqual(error?.serviceMessage, "scripted \(code)")
            XCTAssertEqual(error?.operation, "AssumeRoleWithWebIdentity")
            XCTAssertEqual(error?.httpStatus, status)
            let snapshot = try await harness.client.session("alice")
            XCTAssertEqual(snapshot.state, .notFederated, "\(code): a failed first federation leaves nothing")
        }
    }

    func testIDPCommunicationErrorAndThrottlingAreRetried() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.stsError("IDPCommunicationError", message: "try again"), for: .assumeRoleWithWebIdentity)
        harness.fake.enqueue(.stsError("Throttling", message: "Rate exceeded"), for: .assumeRoleWithWebIdentity)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        XCTAssertEqual(harness.fake.count(.assumeRoleWithWebIdentity), 3)
        XCTAssertEqual(harness.fake.count(.getOpenIdToken), 1, "only the STS call is retried")

        let refused = try Harness()
        refused.fake.setDefault(.stsError("AccessDenied", status: 403), for: .assumeRoleWithWebIdentity)
        await assertThrows(FederationError.self, code: .notAuthorized) {
            try await refused.client.federate(token: TestJWT.valid(), provider: .google, options: self.classic, session: "alice")
        }
        XCTAssertEqual(refused.fake.count(.assumeRoleWithWebIdentity), 1, "a refusal is not retried")
    }

    func testEventsAndStatesAreTheEnhancedFlows() async throws {
        let harness = try Harness()
        let stream = await harness.client.stateUpdates(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        let states = await collect(3, from: stream)
        XCTAssertEqual(states, [.notFederated, .federating, .federated])
        harness.clock.advance(by: 3600)
        let expired = try await harness.client.session("alice")
        XCTAssertEqual(expired.state, .expired)
    }

    func testSessionPersistsAcrossClientsWithoutTheOpenIdToken() async throws {
        // The reader below reads with the real clock: credentials valid for an hour from now.
        let fake = FakeCognito(expiration: Date().addingTimeInterval(3600))
        let keystore = InMemoryKeystore()
        let client = try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
            transport: fake.transport, keystore: keystore, environment: [:], retryRunner: noSleepRunner(),
            now: { Date() }, logger: nil)
        try await client.federate(token: TestJWT.valid(), provider: .google, options: classic, session: "alice")
        let reader = FederationClient(keystore: keystore)
        let credentials = try await reader.credentials(for: "alice")
        XCTAssertEqual(credentials.accessKeyId, "ASIASTSFAKEACCESS001")
        for key in try await keystore.keys() {
            let value = try await keystore.value(forKey: key) ?? []
            XCTAssertNil(leakedRun(in: String(decoding: value, as: UTF8.self), of: [FakeCognito.openIdToken]))
        }
    }

    func testNoSecretInErrorsOrLogs() async throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "classic", factory: { _ in handler })
        logger.logLevel = .trace
        let harness = try Harness(retry: RetryPolicy(maxAttempts: 1), logger: logger)
        let token = TestJWT.valid(sub: "classic-secret-subject")
        var secrets: [String] = [token, FakeCognito.openIdToken, FakeCognito.stsSecretKey, FakeCognito.stsSessionToken]
        secrets += token.split(separator: ".").map(String.init)
        let result = try await harness.client.federate(token: token, provider: .google, options: classic, session: "alice")
        XCTAssertNil(leakedRun(in: String(describing: result), of: secrets))
        // STS echoing both tokens (in the message and the code), upper-cased and cut.
        harness.fake.setDefault(
            .stsError("InvalidIdentityToken\(FakeCognito.openIdToken.prefix(20))",
                      message: "token \(FakeCognito.openIdToken.uppercased()) from \(token.prefix(40)) rejected"),
            for: .assumeRoleWithWebIdentity)
        let error = await assertThrows(FederationError.self) {
            try await harness.client.federate(token: token, provider: .google, options: self.classic, session: "alice")
        }
        // The failure is STS's echoing answer (a refusal before it would leak nothing).
        XCTAssertEqual(error?.httpStatus, 400)
        XCTAssertEqual(harness.fake.calls(.assumeRoleWithWebIdentity).count, 2)
        var dumped = ""
        dump(error, to: &dumped)
        XCTAssertNil(leakedRun(in: dumped, of: secrets), dumped)
        XCTAssertNil(leakedRun(in: String(describing: error), of: secrets))
        XCTAssertFalse(handler.entries.isEmpty, "the client logged nothing: the log half of this test checked nothing")
        for entry in handler.entries {
            XCTAssertNil(leakedRun(in: "\(entry.message) \(entry.metadata)", of: secrets), "\(entry.message)")
        }
    }
}
