import BrokerTestSupport
import Foundation
import XCTest

/// `federate login|guest --flow classic` against a loopback Cognito and STS: the options
/// reach STS, a refused role exits 4, an unavailable STS exits 5, bad options exit 2, and
/// neither the provider token nor the Cognito OpenID token is ever printed.
final class FederateClassicFlowTests: XCTestCase {
    private var harness: FederateHarness!
    static let roleArn = "arn:aws:iam::123456789012:role/CliClassic"

    override func setUpWithError() throws {
        harness = try FederateHarness()
        harness.neverPrinted = [FakeCognito.openIdToken]
        harness.notOnStderr = [FakeCognito.stsSecretKey, FakeCognito.stsSessionToken]
    }

    override func tearDown() {
        harness?.cleanUp()
    }

    /// `login` against `cognito`, with `--sts-endpoint` pointing at it unless `sts` is false.
    private func login(_ cognito: FakeCognito, session: String = "alice", sts: Bool = true, extra: [String]) throws -> FederateRun {
        let token = TestJWT.valid(sub: "classic-\(session)")
        harness.neverPrinted.append(token)
        return try harness.run(
            ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-stdin", "--endpoint", cognito.endpoint,
             "--session", session] + (sts ? ["--sts-endpoint", cognito.endpoint] : []) + extra,
            stdin: token + "\n")
    }

    func testClassicLoginSendsEveryOptionAndPrintsSTSCredentials() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let policy = #"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}]}"#
        // With the byte order mark some editors write, which is not sent.
        let policyFile = try harness.write("\u{FEFF}" + policy + "\n", to: "policy.json")
        let run = try login(cognito, session: "tenant:alice", extra: [
            "--flow", "classic", "--role-arn", Self.roleArn, "--duration", "900", "--policy-file", policyFile, "--format", "json",
        ])
        XCTAssertEqual(run.status, 0, "\(run)")
        XCTAssertEqual(run.stderr, "")
        let object = try Output.assertProcessShape(run.stdout, extraKeys: ["IdentityId", "Provider", "Session"])
        XCTAssertEqual(object["AccessKeyId"] as? String, FakeCognito.stsAccessKeyId)
        XCTAssertEqual(object["IdentityId"] as? String, FakeCognito.defaultIdentityId)

        XCTAssertEqual(cognito.calls.map { $0.header("X-Amz-Target") ?? "STS" },
                       ["AWSCognitoIdentityService.GetId", "AWSCognitoIdentityService.GetOpenIdToken", "STS"])
        let form = try XCTUnwrap(cognito.calls(.assumeRoleWithWebIdentity).first)
        XCTAssertEqual(form.formValue("Action"), "AssumeRoleWithWebIdentity")
        XCTAssertEqual(form.formValue("RoleArn"), Self.roleArn)
        XCTAssertEqual(form.formValue("RoleSessionName"), "tenant_alice")
        XCTAssertEqual(form.formValue("DurationSeconds"), "900")
        XCTAssertEqual(form.formValue("Policy"), policy + "\n")
        XCTAssertEqual(form.formValue("WebIdentityToken"), FakeCognito.openIdToken)

        let credentials = try harness.expect(0, ["credentials", "--session", "tenant:alice"])
        XCTAssertEqual(try Output.assertProcessShape(credentials.stdout)["SecretAccessKey"] as? String, FakeCognito.stsSecretKey)
    }

    func testExplicitRoleSessionNameAndGuest() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--sts-endpoint", cognito.endpoint,
                               "--flow", "classic", "--role-arn", Self.roleArn, "--role-session-name", "kiosk-7", "--session", "g"])
        let form = try XCTUnwrap(cognito.calls(.assumeRoleWithWebIdentity).first)
        XCTAssertEqual(form.formValue("RoleSessionName"), "kiosk-7")
        XCTAssertNil(form.formValue("DurationSeconds"))
        XCTAssertNil(form.formValue("Policy"))
        let status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "g"]).stdout)
        XCTAssertEqual(status["provider"] as? String, "guest")
        XCTAssertEqual(status["state"] as? String, "federated")
    }

    func testEnhancedStaysTheDefault() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let token = TestJWT.valid()
        harness.neverPrinted.append(token)
        try harness.expect(0, ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-stdin", "--endpoint", cognito.endpoint,
                               "--role-arn", Self.roleArn], stdin: token)
        let body = try XCTUnwrap(cognito.calls.last).bodyText
        XCTAssertTrue(body.contains(#""CustomRoleArn":"arn:aws:iam::123456789012:role\/CliClassic""#) || body.contains(#""CustomRoleArn":"arn:aws:iam::123456789012:role/CliClassic""#), body)
    }

    func testRefusedRoleExitsFourAndKeepsThePreviousSession() throws {
        let good = try FakeCognito.served()
        defer { good.stopServing() }
        XCTAssertEqual(try login(good, extra: ["--flow", "classic", "--role-arn", Self.roleArn]).status, 0)
        let before = try harness.expect(0, ["credentials", "--session", "alice"]).stdout

        for (code, status) in [("AccessDenied", 403), ("IDPRejectedClaim", 403), ("InvalidIdentityToken", 400), ("ExpiredTokenException", 400),
                               ("MalformedPolicyDocument", 400), ("PackedPolicyTooLarge", 400), ("RegionDisabledException", 403)] {
            // The service echoes the OpenID token; the CLI must not print it.
            let refusing = try FakeCognito.served()
            refusing.setDefault(.stsError(code, message: "rejected \(FakeCognito.openIdToken)", status: status), for: .assumeRoleWithWebIdentity)
            defer { refusing.stopServing() }
            let run = try login(refusing, extra: ["--flow", "classic", "--role-arn", Self.roleArn])
            XCTAssertEqual(run.status, 4, "\(code): \(run)")
            XCTAssertTrue(run.stderr.contains("STS rejected the request"), run.stderr)
            XCTAssertTrue(run.stderr.contains(code), run.stderr)
            XCTAssertEqual(run.stdout, "")
        }
        XCTAssertEqual(try harness.expect(0, ["credentials", "--session", "alice"]).stdout, before, "the previous session stays")
    }

    func testUnavailableSTSExitsFive() throws {
        for (code, status) in [("Throttling", 400), ("IDPCommunicationError", 400), ("InternalFailure", 500)] {
            let cognito = try FakeCognito.served()
            cognito.setDefault(.stsError(code, message: "later", status: status), for: .assumeRoleWithWebIdentity)
            defer { cognito.stopServing() }
            let run = try login(cognito, extra: ["--flow", "classic", "--role-arn", Self.roleArn])
            XCTAssertEqual(run.status, 5, "\(code): \(run)")
            XCTAssertTrue(run.stderr.contains("STS") && run.stderr.contains("--sts-endpoint"), "the line names STS and its option: \(run)")
            XCTAssertEqual(cognito.calls(.assumeRoleWithWebIdentity).count, 3, "\(code) is retried")
        }
    }

    func testBadClassicOptionsExitTwoWithoutARequest() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        // Each with what its line must say, so that a case refused for another reason fails.
        // The enhanced flow's cases go without --sts-endpoint, itself a classic-only option.
        let cases: [(extra: [String], sts: Bool, says: String)] = [
            (["--flow", "classic"], true, "--flow classic needs --role-arn"),
            (["--flow", "classic", "--role-arn", Self.roleArn, "--duration", "899"], true, "900 to 43200 seconds, not 899"),
            (["--flow", "classic", "--role-arn", Self.roleArn, "--duration", "43201"], true, "900 to 43200 seconds, not 43201"),
            (["--flow", "classic", "--role-arn", "not-an-arn"], true, "--role-arn must be an IAM role ARN"),
            (["--role-arn", "not-an-arn"], false, "--role-arn must be an IAM role ARN"),
            (["--role-arn", "arn:aws:iam::123456789012:user/alice"], false, "--role-arn must be an IAM role ARN"),
            (["--flow", "classic", "--role-arn", Self.roleArn, "--role-session-name", "has space"], true, "role session name must be 2 to 64"),
            (["--flow", "classic", "--role-arn", Self.roleArn, "--policy-file", harness.directory + "/missing.json"], true, "missing.json"),
            (["--flow", "enhanced", "--duration", "900"], false, "--duration applies to --flow classic only"),
            (["--role-session-name", "x1"], false, "--role-session-name applies to --flow classic only"),
            (["--policy-file", "p.json"], false, "--policy-file applies to --flow classic only"),
            ([], true, "--sts-endpoint applies to --flow classic only"),
            (["--flow", "basic", "--role-arn", Self.roleArn], true, "'basic'"),
            ]
        for (extra, sts, says) in cases {
            let run = try login(cognito, sts: sts, extra: extra)
            XCTAssertEqual(run.status, 2, "\(extra): \(run)")
            XCTAssertEqual(run.stderr.split(separator: "\n").count, 1, "\(extra): one line: \(run.stderr)")
            XCTAssertTrue(run.stderr.contains(says), "\(extra): says \(says): \(run.stderr)")
            // Refused before the keystore is opened: a usage error creates nothing.
            XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "\(extra) created the keystore")
        }
        // A policy file that is empty, over 64 KiB, not UTF-8 text or not a JSON object.
        for (name, contents) in [
            ("empty.json", Data("\n".utf8)), ("large.json", Data(repeating: UInt8(ascii: " "), count: 64 * 1024 + 1)),
            ("binary.json", Data([0x7B, 0xFF, 0xFE, 0x7D])), ("text.json", Data("Allow s3:GetObject\n".utf8)),
        ] {
            let path = harness.directory + "/" + name
            try contents.write(to: URL(fileURLWithPath: path))
            let run = try login(cognito, extra: ["--flow", "classic", "--role-arn", Self.roleArn, "--policy-file", path])
            XCTAssertEqual(run.status, 2, "\(name): \(run)")
            harness.assertOneErrorLine(run)
            XCTAssertTrue(run.stderr.contains(name), "the line names the file: \(run.stderr)")
        }
        try harness.expect(2, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--role-arn", Self.roleArn])
        try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-stdin", "--endpoint", cognito.endpoint,
                               "--flow", "classic", "--role-arn", Self.roleArn, "--sts-endpoint", "http://sts.example.com/"], stdin: TestJWT.valid())
        // An unset variable passed on: not "use AWS's own endpoint" (the last value given wins).
        for (extra, option) in [
            (["--flow", "classic", "--role-arn", Self.roleArn, "--sts-endpoint", ""], "--sts-endpoint"),
            (["--flow", "classic", "--role-arn", Self.roleArn, "--endpoint", ""], "--endpoint"),
        ] {
            let run = try login(cognito, extra: extra)
            XCTAssertEqual(run.status, 2, "\(extra): \(run)")
            XCTAssertTrue(run.stderr.contains("\(option) is empty"), run.stderr)
        }
        let guest = try harness.expect(2, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", ""])
        XCTAssertTrue(guest.stderr.contains("--endpoint is empty"), guest.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "an empty endpoint created the keystore")
        XCTAssertEqual(cognito.calls.count, 0, "nothing was sent")
    }
}
