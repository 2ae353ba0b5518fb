import BrokerTestSupport
import Foundation
import XCTest

/// boto3 and the AWS CLI as children of `federate exec`, calling S3 on moto with the
/// credentials they fetched from the credential server.
///
/// moto accepts any credentials for S3, so each test checks what the child signed with:
/// the `Credential=` of the `Authorization` header is the session's access key ID, and
/// the SDK says the credentials came from the container provider.
final class FederateExecMotoTests: XCTestCase {
    private var harness: FederateHarness!
    private var moto: MotoServer!

    override func setUp() async throws {
        moto = try MotoServer.start()
        harness = try FederateHarness()
        harness.notOnStderr = [FederateMotoTests.motoSecret, FederateMotoTests.motoSessionToken]
        let pool = try await moto.createIdentityPool(
            name: "exec-\(UUID().uuidString.prefix(8))",
            developerProviderName: FederateMotoTests.developerProvider,
            supportedLoginProviders: ["accounts.google.com": "test-client-id"])
        let token = TestJWT.valid(sub: "google-user-exec")
        harness.neverPrinted.append(token)
        try harness.expect(0, [
            "login", "--pool-id", pool, "--provider", "google", "--token-stdin", "--endpoint", moto.endpoint, "--session", "alice",
        ], stdin: token)
    }

    override func tearDown() async throws {
        moto?.stop()
        harness?.cleanUp()
    }

    /// The child's environment besides what exec sets: moto as the endpoint, no AWS config.
    private var childEnvironment: [String: String?] {
        [
            "AWS_ENDPOINT_URL": moto.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true",
            // Leftovers a user's shell may hold: exec removes them.
            "AWS_ACCESS_KEY_ID": "AKIASHOULDNOTBEUSED0",
            "AWS_SECRET_ACCESS_KEY": "should-not-be-used",
            "AWS_PROFILE": "nonexistent-profile",
        ]
    }

    func testBoto3ChildCallsS3WithTheServedCredentials() throws {
        try Self.require(["python3", "-c", "import boto3"], what: "boto3 (pip install boto3)")
        let script = try harness.write("""
            import json, os
            import boto3
            from botocore.config import Config

            session = boto3.Session()
            credentials = session.get_credentials()
            signed = []
            s3 = session.client("s3", config=Config(s3={"addressing_style": "path"}))
            s3.meta.events.register("before-send.s3.*", lambda request, **kwargs: signed.append(request.headers["Authorization"].decode() if isinstance(request.headers["Authorization"], bytes) else request.headers["Authorization"]))
            s3.create_bucket(Bucket="exec-bucket")
            names = [bucket["Name"] for bucket in s3.list_buckets()["Buckets"]]
            print(json.dumps({
                "method": credentials.method,
                "access_key": credentials.get_frozen_credentials().access_key,
                "secret_matches": credentials.get_frozen_credentials().secret_key == os.environ.get("EXPECTED_SECRET"),
                "credential_scopes": [header.split("Credential=")[1].split("/")[0] for header in signed],
                "buckets": names,
            }))

            """, to: "boto3_s3.py")
        var environment = childEnvironment
        environment["EXPECTED_SECRET"] = FederateMotoTests.motoSecret
        let run = try harness.run(["exec", "--session", "alice", "--expiry-margin", "0", "--", "python3", script], environment: environment)
        XCTAssertEqual(run.status, 0, "\(run)")
        let object = try FederateExecTests.json(run.stdout.trimmingCharacters(in: .newlines))
        XCTAssertEqual(object["method"] as? String, "container-role", "boto3 used the container credential provider")
        XCTAssertEqual(object["access_key"] as? String, FederateMotoTests.motoAccessKey)
        XCTAssertEqual(object["secret_matches"] as? Bool, true)
        let scopes = object["credential_scopes"] as? [String] ?? []
        XCTAssertEqual(scopes.count, 2, "both S3 calls were signed")
        XCTAssertTrue(scopes.allSatisfy { $0 == FederateMotoTests.motoAccessKey }, "\(scopes)")
        XCTAssertEqual(object["buckets"] as? [String], ["exec-bucket"])
    }

    func testAWSCLIChildCallsS3WithTheServedCredentials() throws {
        try Self.require(["aws", "--version"], what: "the AWS CLI (pip install awscli)")
        let debugLog = harness.directory + "/aws-debug.log"
        let script = """
            set -e
            aws configure list | grep access_key
            aws s3api create-bucket --bucket cli-bucket --debug 2>'\(debugLog)' >/dev/null
            aws s3api list-buckets --query 'Buckets[].Name' --output text
            """
        let run = try harness.run(["exec", "--session", "alice", "--expiry-margin", "0", "--", "sh", "-c", script], environment: childEnvironment)
        XCTAssertEqual(run.status, 0, "\(run)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        let accessKeyLine = try XCTUnwrap(lines.first { $0.contains("access_key") }, run.stdout)
        XCTAssertTrue(accessKeyLine.contains("container-role"), accessKeyLine)
        XCTAssertTrue(accessKeyLine.contains(String(FederateMotoTests.motoAccessKey.suffix(4))), accessKeyLine)
        XCTAssertEqual(lines.last, "cli-bucket")
        let debug = (try? String(contentsOfFile: debugLog, encoding: .utf8)) ?? ""
        XCTAssertTrue(debug.contains("Credential=\(FederateMotoTests.motoAccessKey)/"), "the request was signed with the session's key")
        XCTAssertFalse(debug.contains("Credential=AKIASHOULDNOTBEUSED0/"))
    }

    /// A session cleared while the child runs: the SDK's next fetch is refused.
    func testBoto3ChildSeesAClearedSessionAsAnError() throws {
        try Self.require(["python3", "-c", "import boto3"], what: "boto3 (pip install boto3)")
        let go = harness.directory + "/go"
        let script = try harness.write("""
            import os, sys, time
            import boto3
            print(boto3.Session().get_credentials().get_frozen_credentials().access_key, flush=True)
            while not os.path.exists(sys.argv[1]):
                time.sleep(0.01)
            try:
                print(boto3.Session().get_credentials().get_frozen_credentials().access_key, flush=True)
            except Exception as error:
                print(type(error).__name__, flush=True)

            """, to: "boto3_cleared.py")
        let exec = try BackgroundFederate(harness, ["exec", "--session", "alice", "--expiry-margin", "0", "--", "python3", script, go], environment: childEnvironment)
        XCTAssertEqual(exec.waitForLines(1).first, FederateMotoTests.motoAccessKey)
        try harness.expect(0, ["clear", "--session", "alice"])
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        let lines = exec.waitForLines(2, timeout: 120)
        XCTAssertEqual(exec.waitForExit(timeout: 120), 0, exec.stderr)
        XCTAssertNotEqual(lines.last, FederateMotoTests.motoAccessKey, "a cleared session is never served")
        XCTAssertTrue(lines.last?.contains("Error") ?? false, "\(lines)")
    }

    // MARK: - Helpers

    private static func require(_ command: [String], what: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw missingPrerequisite("\(what) is missing")
        }
    }
}
