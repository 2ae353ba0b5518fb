import BrokerTestSupport
@testable import Federation
import Foundation
import InMemoryLogging
import Logging
import SecureStorage
import XCTest

/// No secret (provider token, secret key, session token) reaches a log, an error or a printed value.
final class SecretRedactionTests: XCTestCase {
    private let token = TestJWT.make(sub: "us-east-1:secret-subject", exp: testEpoch.addingTimeInterval(3600), iss: "https://accounts.google.com")
    private let opaqueToken = "EAAGm0PX4ZCpsBAOpaqueFacebookToken1234567890"

    private var secrets: [String] {
        [token, opaqueToken, FakeCognito.secretKey, FakeCognito.sessionToken]
            + token.split(separator: ".").map(String.init)  // no part of the JWT either
    }

    /// The checker itself: a secret found raw, in any letter case, JSON-escaped or
    /// percent-encoded (the fake's secret key has a `/` in every run of 16 characters, so
    /// without these readings its escaped forms would pass); 15 characters are not a leak.
    func testTheLeakCheckerSeesEscapedAndEncodedSecrets() {
        let key = FakeCognito.secretKey
        let slash = key.firstIndex(of: "/")!
        let piece = String(key[slash...].prefix(16))
        let forms = [
            piece, piece.uppercased(),
            piece.replacingOccurrences(of: "/", with: "\\/"),
            piece.replacingOccurrences(of: "/", with: "\\u002F"),
            piece.replacingOccurrences(of: "/", with: "%2F"),
            piece.replacingOccurrences(of: "/", with: "%2f").uppercased(),
            "{\"k\":\"" + key.replacingOccurrences(of: "/", with: "\\/") + "\"}",
            // JSON logged inside a JSON string, and a percent-encoded JSON body.
            piece.replacingOccurrences(of: "/", with: "\\\\\\/"),
            piece.replacingOccurrences(of: "/", with: "%5C%2F"),
        ]
        for form in forms {
            XCTAssertNotNil(leakedRun(in: "before " + form + " after", of: [key]), form)
        }
        XCTAssertNil(leakedRun(in: String(piece.prefix(15)), of: [key]))
        XCTAssertNil(leakedRun(in: "nothing here %2F \\/ \\u0041", of: [key]))
        // Short secrets are looked for whole, in each reading.
        XCTAssertNotNil(leakedRun(in: "password=p%40ss", of: ["p@ss"]))
        XCTAssertNil(leakedRun(in: "password=p%40s", of: ["p@ss"]))
    }

    /// No run of 16 or more characters of a secret, in any letter case (checked
    /// independently of the library's redactor, window by window).
    private func assertClean(_ text: String, _ what: String, also extra: [String] = [], line: UInt = #line) {
        if let leaked = leakedRun(in: text, of: secrets + extra) {
            XCTFail("\(what) contains 16 characters of a secret (\(leaked.prefix(4))…): \(text)", line: line)
        }
    }

    private func assertClean(_ error: FederationError?, also extra: [String] = [], line: UInt = #line) {
        guard let error else { return }
        assertClean(error.description, "error description", also: extra, line: line)
        assertClean(error.debugDescription, "error debugDescription", also: extra, line: line)
        assertClean(String(describing: error), "String(describing: error)", also: extra, line: line)
        assertClean(String(reflecting: error), "String(reflecting: error)", also: extra, line: line)
        assertClean(error.localizedDescription, "error localizedDescription", also: extra, line: line)
        var dumped = ""
        dump(error, to: &dumped)
        assertClean(dumped, "dump(error)", also: extra, line: line)
    }

    private func assertClean(_ snapshot: SessionSnapshot, line: UInt = #line) {
        assertClean(snapshot.description, "snapshot description", line: line)
        assertClean(String(reflecting: snapshot), "snapshot debugDescription", line: line)
        assertClean("\(snapshot)", "snapshot interpolation", line: line)
        var dumped = ""
        dump(snapshot, to: &dumped)
        assertClean(dumped, "dump(snapshot)", line: line)
        if let credentials = snapshot.credentials { assertClean(credentials, line: line) }
    }

    private func assertClean(_ credentials: AWSCredentials, line: UInt = #line) {
        assertClean(credentials.description, "credentials description", line: line)
        assertClean(credentials.debugDescription, "credentials debugDescription", line: line)
        assertClean(String(reflecting: credentials), "String(reflecting: credentials)", line: line)
        assertClean("\(credentials)", "credentials interpolation", line: line)
        var dumped = ""
        dump(credentials, to: &dumped)
        assertClean(dumped, "dump(credentials)", line: line)
        assertClean(String(describing: Mirror(reflecting: credentials).children.map { "\($0.label ?? ""): \($0.value)" }), "mirror", line: line)
    }

    private func assertClean(_ result: FederationResult, line: UInt = #line) {
        assertClean(String(describing: result), "result description", line: line)
        assertClean(String(reflecting: result), "result debugDescription", line: line)
        var dumped = ""
        dump(result, to: &dumped)
        assertClean(dumped, "dump(result)", line: line)
        assertClean(result.credentials, line: line)
    }

    private func assertClean(_ handler: InMemoryLogHandler, line: UInt = #line) {
        XCTAssertFalse(handler.entries.isEmpty, "the logger was used", line: line)
        for entry in handler.entries {
            assertClean(entry.message.description, "log message", line: line)
            for (key, value) in entry.metadata {
                assertClean(key, "log metadata key", line: line)
                assertClean(value.description, "log metadata value \(key)", line: line)
            }
            if let error = entry.error { assertClean(String(describing: error), "log error", line: line) }
        }
    }

    private func makeHarness(retry: RetryPolicy = .standard) throws -> (Harness, InMemoryLogHandler) {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "secret-test", factory: { _ in handler })
        logger.logLevel = .trace
        return (try Harness(retry: retry, logger: logger), handler)
    }

    func testSuccessfulFederationLeaksNothing() async throws {
        let (harness, logs) = try makeHarness()
        let result = try await harness.client.federate(token: token, provider: .google, session: "alice")
        let opaque = try await harness.client.federate(token: opaqueToken, provider: .facebook, session: "bob")
        assertClean(result)
        assertClean(opaque)
        assertClean(try await harness.client.session("alice"))
        assertClean(try await harness.client.session("bob"))
        assertClean(logs)
        XCTAssertTrue(logs.entries.contains { $0.level == .trace }, "trace-level lines were captured too")
        XCTAssertTrue(logs.entries.contains { $0.level == .debug })
    }

    func testNotAuthorizedWhoseMessageEchoesTheTokenLeaksNothing() async throws {
        let (harness, logs) = try makeHarness()
        harness.fake.enqueue(.error("NotAuthorizedException", message: "Invalid login token. Token '\(token)' is not valid."), for: .getId)
        harness.fake.enqueue(
            .error("NotAuthorizedException", message: "Bad token \(opaqueToken)", status: 400, messageKey: "Message"), for: .getId)
        let jwtError = await assertThrows(FederationError.self, code: .notAuthorized) {
            try await harness.client.federate(token: token, provider: .google, session: "alice")
        }
        let opaqueError = await assertThrows(FederationError.self, code: .notAuthorized) {
            try await harness.client.federate(token: opaqueToken, provider: .facebook, session: "alice")
        }
        assertClean(jwtError)
        assertClean(opaqueError)
        XCTAssertEqual(jwtError?.serviceMessage?.hasPrefix("Invalid login token."), true, "the rest of the message is kept")
        assertClean(logs)
    }

    func testRejectedCachedIdentityEchoingTheTokenLeaksNothing() async throws {
        let (harness, logs) = try makeHarness()
        try await harness.client.federate(token: token, provider: .google, session: "alice")
        harness.fake.enqueue(.error("NotAuthorizedException", message: "Logins don't match: \(token)"), for: .getCredentialsForIdentity)
        harness.fake.enqueue(.error("NotAuthorizedException", message: "Invalid login token \(token)"), for: .getCredentialsForIdentity)
        let error = await assertThrows(FederationError.self, code: .notAuthorized) {
            try await harness.client.federate(token: token, provider: .google, session: "alice")
        }
        assertClean(error)
        assertClean(try await harness.client.session("alice"))
        assertClean(logs)
    }

    func testMalformedResponseLeaksNothing() async throws {
        let (harness, logs) = try makeHarness()
        // The secret key arrives but the session token has the wrong type: the error names the field, not the values.
        harness.fake.enqueue(
            .raw(body: #"{"IdentityId":"us-east-1:x","Credentials":{"AccessKeyId":"ASIA","SecretKey":"\#(FakeCognito.secretKey)","SessionToken":42,"Expiration":1700003600}}"#),
            for: .getCredentialsForIdentity)
        let error = await assertThrows(FederationError.self, code: .invalidResponse) {
            try await harness.client.federate(token: token, provider: .google, session: "alice")
        }
        XCTAssertEqual(error?.message.contains("SessionToken"), true, error?.message ?? "")
        assertClean(error)
        assertClean(logs)
    }

    func testTerminationLeaksNothing() async throws {
        let (harness, logs) = try makeHarness()
        try await harness.client.federate(
            token: opaqueToken, provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:d"))
        harness.fake.enqueue(.error("ResourceNotFoundException", message: "Identity not found for \(opaqueToken)"), for: .getCredentialsForIdentity)
        let error = await assertThrows(FederationError.self, code: .identityTerminated) {
            try await harness.client.federate(
                token: opaqueToken, provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:d"))
        }
        assertClean(error)
        assertClean(logs)
    }

    func testGuestFlowLeaksNothing() async throws {
        let (harness, logs) = try makeHarness()
        let result = try await harness.client.federateAsGuest(session: "visitor")
        assertClean(result)
        assertClean(try await harness.client.session("visitor"))
        assertClean(logs)
    }

    func testLocalTokenFailureLeaksNothing() async throws {
        let (harness, logs) = try makeHarness()
        let stale = TestJWT.make(sub: "s", exp: testEpoch.addingTimeInterval(-3600))
        // The token under test, and each part of it (header, payload, signature) long enough to search.
        let staleSecrets = [stale] + stale.split(separator: ".").map(String.init).filter { $0.count >= 16 }
        let error = await assertThrows(FederationError.self, code: .invalidToken) { try await harness.client.federate(token: stale, provider: .google) }
        XCTAssertNotNil(error)
        assertClean(error, also: staleSecrets)
        // The local check may log nothing; whatever it logs holds no part of the token.
        for entry in logs.entries {
            assertClean(entry.message.description, "log message", also: staleSecrets)
            for (key, value) in entry.metadata {
                assertClean(key, "log metadata key", also: staleSecrets)
                assertClean(value.description, "log metadata value \(key)", also: staleSecrets)
            }
            if let logged = entry.error { assertClean(String(describing: logged), "log error", also: staleSecrets) }
        }
    }

    // MARK: Echoed fragments (hostile-input review)

    /// A service, or anything in the path, that echoes part of the token: its first 150
    /// characters, the JWT signature alone, the token upper-cased, or the token in the
    /// error-type header.
    func testEchoedFragmentsOfTheTokenLeakNothing() async throws {
        let parts = token.split(separator: ".").map(String.init)
        let echoes: [(String, FakeCognito.Reply)] = [
            ("first 150 characters", .error("NotAuthorizedException", message: "Invalid login token \(token.prefix(150))")),
            ("signature alone", .error("NotAuthorizedException", message: "bad signature \(parts[2])")),
            ("payload alone", .error("NotAuthorizedException", message: "claims \(parts[1]) rejected")),
            ("upper-cased", .error("NotAuthorizedException", message: "TOKEN \(token.uppercased())")),
            ("lower-cased suffix", .error("NotAuthorizedException", message: "…\(token.suffix(40).lowercased())")),
            ("in x-amzn-ErrorType", .raw(
                status: 400,
                headers: FakeCognito.jsonHeaders + [("x-amzn-ErrorType", "NotAuthorizedException\(token)")],
                body: #"{"message":"no"}"#)),
            ("in the body's __type", .raw(status: 400, body: #"{"__type":"Bad\#(parts[1])","message":"x"}"#)),
        ]
        for (what, reply) in echoes {
            let (harness, logs) = try makeHarness()
            harness.fake.enqueue(reply, for: .getId)
            let error = await assertThrows(FederationError.self) {
                try await harness.client.federate(token: token, provider: .google, session: "alice")
            }
            XCTAssertNotNil(error, what)
            // The failure is the echoing answer's (a refusal before it would leak nothing).
            XCTAssertEqual(harness.fake.calls(.getId).count, 1, what)
            XCTAssertEqual(error?.httpStatus, 400, what)
            assertClean(error)
            assertClean(logs)
        }
    }

    /// The developer backend's SigV4 secret and session token are scrubbed the same way.
    func testEchoedSigningSecretsLeakNothing() async throws {
        let fake = FakeCognito()
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        let sessionToken = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN/AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+=="
        fake.enqueue(
            .error("NotAuthorizedException", message: "signature for \(secret.dropFirst(3).uppercased()) with token \(sessionToken.dropFirst(5).lowercased()) is wrong"),
            for: .getOpenIdTokenForDeveloperIdentity)
        let issuer = try DeveloperIdentityIssuer(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
            developerProviderName: "login.example",
            credentials: SigningCredentials(accessKeyId: "AKIDEXAMPLE", secretAccessKey: secret, sessionToken: sessionToken),
            transport: fake.transport, environment: [:], retryRunner: noSleepRunner(), logger: nil)
        let error = await assertThrows(FederationError.self, code: .notAuthorized) { try await issuer.openIdToken(forUser: "user-1") }
        XCTAssertNotNil(error)
        // description, debugDescription (String(reflecting:)), localizedDescription and dump.
        assertClean(error, also: [secret, sessionToken])
    }

    func testRedactorRemovesEveryRunOfSixteenInAnyCase() {
        let redactor = SecretRedactor(secrets: [token])
        let text = "a \(token.dropFirst(5).prefix(16).uppercased()) b \(token.prefix(15)) c"
        let redacted = redactor.redact(text)
        XCTAssertNil(leakedRun(in: redacted, of: [token]), redacted)
        XCTAssertTrue(redacted.hasPrefix("a <redacted> b "), redacted)
        XCTAssertTrue(redacted.hasSuffix(" c"), "text around the run is kept: \(redacted)")
        XCTAssertTrue(redacted.contains(String(token.prefix(15))), "15 characters are below the threshold and stay")
    }
}
