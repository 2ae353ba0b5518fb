import BrokerTestSupport
import Foundation
import XCTest

/// The CLI against moto's Cognito Identity, an independent implementation; and the
/// credential_process interop with boto3.
///
/// moto's credentials: access key `TESTACCESSKEY12345`, secret `ABCSECRETKEY`, session
/// token `ABC12345`, valid 90 s, so reads use `--expiry-margin 0` unless a test wants them expired.
final class FederateMotoTests: XCTestCase {
    private var harness: FederateHarness!
    private var moto: MotoServer!

    static let motoAccessKey = "TESTACCESSKEY12345"
    static let motoSecret = "ABCSECRETKEY"
    static let motoSessionToken = "ABC12345"
    static let developerProvider = "login.broker.test"

    override func setUp() async throws {
        moto = try MotoServer.start()
        harness = try FederateHarness()
        harness.notOnStderr = [Self.motoSecret, Self.motoSessionToken]
    }

    override func tearDown() async throws {
        moto?.stop()
        harness?.cleanUp()
    }

    private func pool() async throws -> String {
        try await moto.createIdentityPool(
            name: "cli-\(UUID().uuidString.prefix(8))",
            developerProviderName: Self.developerProvider,
            supportedLoginProviders: ["accounts.google.com": "test-client-id"]
        )
    }

    private func googleLogin(pool: String, session: String = "alice", extra: [String] = []) throws -> FederateRun {
        let token = TestJWT.valid(sub: "google-user-\(session)")
        harness.neverPrinted.append(token)
        let path = try harness.write(token + "\n", to: "google-token-\(session)")
        return try harness.run(["login", "--pool-id", pool, "--provider", "google", "--token-file", path, "--endpoint", moto.endpoint, "--session", session] + extra)
    }

    func testGoogleLoginThenCredentialsInEveryFormat() async throws {
        let pool = try await pool()
        let login = try googleLogin(pool: pool)
        XCTAssertEqual(login.status, 0, "\(login)")
        let printed = try Output.assertProcessShape(login.stdout)
        XCTAssertEqual(printed["AccessKeyId"] as? String, Self.motoAccessKey)

        let process = try harness.expect(0, ["credentials", "--session", "alice", "--expiry-margin", "0"])
        XCTAssertEqual(process.stderr, "")
        let object = try Output.assertProcessShape(process.stdout)
        XCTAssertEqual(object["AccessKeyId"] as? String, Self.motoAccessKey)
        XCTAssertEqual(object["SecretAccessKey"] as? String, Self.motoSecret)
        XCTAssertEqual(object["SessionToken"] as? String, Self.motoSessionToken)
        let expiration = try XCTUnwrap(Output.parseISO8601(object["Expiration"] as? String ?? ""))
        XCTAssertLessThan(expiration.timeIntervalSinceNow, 120, "moto's credentials last 90 s")

        let json = try harness.expect(0, ["credentials", "--session", "alice", "--expiry-margin", "0", "--format", "json"])
        let jsonObject = try Output.assertProcessShape(json.stdout, extraKeys: ["IdentityId", "Provider", "Session"])
        let identityId = try XCTUnwrap(jsonObject["IdentityId"] as? String)
        XCTAssertTrue(identityId.hasPrefix("us-east-1:"), identityId)
        XCTAssertEqual(jsonObject["Provider"] as? String, "google")
        XCTAssertEqual(jsonObject["Session"] as? String, "alice")

        let env = try harness.expect(0, ["credentials", "--session", "alice", "--expiry-margin", "0", "--format", "env"])
        XCTAssertEqual(env.stdout, """
            export AWS_ACCESS_KEY_ID='\(Self.motoAccessKey)'
            export AWS_SECRET_ACCESS_KEY='\(Self.motoSecret)'
            export AWS_SESSION_TOKEN='\(Self.motoSessionToken)'

            """)

        let status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "alice", "--expiry-margin", "0"]).stdout)
        XCTAssertEqual(status["state"] as? String, "federated")
        XCTAssertEqual(status["identityId"] as? String, identityId)
        XCTAssertEqual(status["provider"] as? String, "google")
        XCTAssertEqual(status["expiration"] as? String, object["Expiration"] as? String)
    }

    func testDeveloperLoginWithIdentityIdFromStdin() async throws {
        let pool = try await pool()
        let developer = try await moto.developerToken(poolId: pool, developerProviderName: Self.developerProvider, userId: "dev-user-1")
        harness.neverPrinted = [developer.token]
        let login = try harness.expect(0, [
            "login", "--pool-id", pool, "--provider", "developer", "--identity-id", developer.identityId,
            "--token-stdin", "--endpoint", moto.endpoint, "--session", "dev", "--format", "json", "--expiry-margin", "0",
        ], stdin: developer.token + "\n")
        let object = try Output.assertProcessShape(login.stdout, extraKeys: ["IdentityId", "Provider", "Session"])
        XCTAssertEqual(object["IdentityId"] as? String, developer.identityId)
        XCTAssertEqual(object["Provider"] as? String, "developer")
        let credentials = try harness.expect(0, ["credentials", "--session", "dev", "--expiry-margin", "0", "--format", "json"])
        XCTAssertEqual(try Output.jsonObject(credentials.stdout)["IdentityId"] as? String, developer.identityId)
    }

    func testGuestThenLoginLinksTheIdentity() async throws {
        let pool = try await pool()
        let guest = try harness.expect(0, ["guest", "--pool-id", pool, "--endpoint", moto.endpoint, "--session", "g", "--format", "json", "--expiry-margin", "0"])
        let guestId = try XCTUnwrap(try Output.jsonObject(guest.stdout)["IdentityId"] as? String)
        var status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "g", "--expiry-margin", "0"]).stdout)
        XCTAssertEqual(status["provider"] as? String, "guest")
        XCTAssertEqual(status["identityId"] as? String, guestId)
        XCTAssertEqual(try googleLogin(pool: pool, session: "g", extra: ["--expiry-margin", "0"]).status, 0)
        status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "g", "--expiry-margin", "0"]).stdout)
        XCTAssertEqual(status["provider"] as? String, "google")
        XCTAssertEqual(status["identityId"] as? String, guestId, "the login is linked to the guest identity")
    }

    /// `AWS_CA_BUNDLE`, as the AWS SDKs and CLI read it, names the authorities HTTPS trusts:
    /// a guest login to moto over TLS under a private authority succeeds with it and exits 5
    /// without it (TLS verification failed, nothing sent); a bundle that cannot be read is a
    /// usage error (2) before anything is sent or stored.
    func testAWSCABundleNamesTheAuthoritiesHTTPSTrusts() async throws {
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        let secure = try MotoServer.start(certificates: certificates)
        defer { secure.stop() }
        let pool = try await secure.createIdentityPool(name: "cli-tls", allowUnauthenticated: true)
        let arguments = ["guest", "--pool-id", pool, "--endpoint", secure.endpoint, "--session", "g", "--expiry-margin", "0"]
        try harness.expect(0, arguments, environment: ["AWS_CA_BUNDLE": certificates.authorityFile])
        let refused = try harness.expect(5, arguments, environment: ["AWS_CA_BUNDLE": nil])
        XCTAssertTrue(refused.stderr.contains("TLS"), refused.stderr)
        let missing = try harness.expect(2, arguments, environment: ["AWS_CA_BUNDLE": harness.directory + "/no-such-bundle.pem"])
        XCTAssertTrue(missing.stderr.contains("AWS_CA_BUNDLE"), missing.stderr)
    }

    /// `AWS_CA_BUNDLE` replaces the system's authorities rather than adding to them: libcurl
    /// reads its built-in CA directory (`/etc/ssl/certs` on Debian) beside any CA file unless
    /// told otherwise. In a mount namespace of the test's own, a directory holding the first
    /// test authority is bound over `/etc/ssl/certs`: a server under that authority is reached
    /// with no bundle named (so the set-up works), and refused with `AWS_CA_BUNDLE` naming the
    /// second authority.
    func testAWSCABundleReplacesTheSystemAuthorities() async throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare"),
              FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")
        else {
            throw missingPrerequisite("root, unshare and openssl, to bind a directory over /etc/ssl/certs in a mount namespace")
        }
        let system = try TestCertificates.make()
        defer { system.remove() }
        let other = try TestCertificates.make()
        defer { other.remove() }
        let secure = try MotoServer.start(certificates: system)
        defer { secure.stop() }
        let pool = try await secure.createIdentityPool(name: "cli-tls-system", allowUnauthenticated: true)
        let certificates = harness.directory + "/system-certs"
        try FileManager.default.createDirectory(atPath: certificates, withIntermediateDirectories: true)
        // The authority as both the built-in bundle file and, for the directory lookup, under
        // its subject hash and `.0`: a bundle named in AWS_CA_BUNDLE replaces the file, and the
        // directory must not count either.
        let launcher = [
            "/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
            #"/bin/cp "$1" "$0/ca-certificates.crt" && /bin/cp "$1" "$0/$(/usr/bin/openssl x509 -hash -noout -in "$1").0" "#
                + #"&& /bin/mount --bind "$0" /etc/ssl/certs && shift && exec "$@""#,
            certificates, system.authorityFile,
        ]
        let arguments = ["guest", "--pool-id", pool, "--endpoint", secure.endpoint, "--expiry-margin", "0"]
        let trusted = try harness.run(arguments + ["--session", "system"], environment: ["AWS_CA_BUNDLE": nil], launcher: launcher)
        XCTAssertEqual(trusted.status, 0, "the authority bound over /etc/ssl/certs was not trusted: \(trusted)")
        let replaced = try harness.run(
            arguments + ["--session", "bundle"], environment: ["AWS_CA_BUNDLE": other.authorityFile], launcher: launcher)
        XCTAssertEqual(replaced.status, 5, "the system's authorities were trusted beside AWS_CA_BUNDLE: \(replaced)")
        XCTAssertTrue(replaced.stderr.contains("TLS"), replaced.stderr)
    }

    func testClearThenCredentialsExitsThree() async throws {
        let pool = try await pool()
        XCTAssertEqual(try googleLogin(pool: pool).status, 0)
        try harness.expect(0, ["credentials", "--session", "alice", "--expiry-margin", "0"])
        try harness.expect(0, ["clear", "--session", "alice"])
        try harness.expect(3, ["credentials", "--session", "alice", "--expiry-margin", "0"])
    }

    func testMotoCredentialsInsideTheDefaultMarginAreExpired() async throws {
        let pool = try await pool()
        let login = try googleLogin(pool: pool)  // default --expiry-margin 120 > moto's 90 s
        XCTAssertEqual(login.status, 0, "\(login)")
        try harness.expect(3, ["credentials", "--session", "alice", "--expiry-margin", "120"])
        let status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "alice"]).stdout)
        XCTAssertEqual(status["state"] as? String, "expired")
    }

    func testMigrateMovesTheSessionToAnAccessGroup() async throws {
        let pool = try await pool()
        XCTAssertEqual(try googleLogin(pool: pool).status, 0)
        let migrate = try harness.expect(0, ["migrate", "--from", "none", "--to", "team"])
        XCTAssertEqual(migrate.stdout, "")
        let moved = try harness.expect(0, ["credentials", "--session", "alice", "--access-group", "team", "--expiry-margin", "0"])
        XCTAssertEqual(try Output.assertProcessShape(moved.stdout)["AccessKeyId"] as? String, Self.motoAccessKey)
        try harness.expect(3, ["credentials", "--session", "alice", "--expiry-margin", "0"])
        // And back.
        try harness.expect(0, ["migrate", "--from", "team", "--to", "none"])
        try harness.expect(0, ["credentials", "--session", "alice", "--expiry-margin", "0"])
        try harness.expect(3, ["credentials", "--session", "alice", "--access-group", "team", "--expiry-margin", "0"])
    }

    func testNoRunLeaksATokenOrSecret() async throws {
        // Every run in this class is already checked by the harness; this test adds `--verbose`
        // runs, whose debug log on stderr must not show the token or a credential either.
        // moto accepts any login, so every run here succeeds (a provider the pool does not list
        // included, then a switch to google on the same session); tokens echoed by a service
        // that rejects them are FederateHostileInputTests' subject.
        let pool = try await pool()
        let token = TestJWT.valid(sub: "leak-check")
        harness.neverPrinted = [token]
        let runs = [
            try harness.run(["login", "--pool-id", pool, "--provider", "oidc:unknown.example.com", "--token-stdin", "--endpoint", moto.endpoint, "--verbose"], stdin: token),
            try harness.run(["login", "--pool-id", pool, "--provider", "google", "--token-stdin", "--endpoint", moto.endpoint, "--verbose"], stdin: token),
            try harness.run(["credentials", "--verbose", "--expiry-margin", "0"]),
            try harness.run(["status", "--verbose"]),
        ]
        for run in runs {
            XCTAssertEqual(run.status, 0, "\(run)")
            XCTAssertFalse(run.stderr.isEmpty, "--verbose logged nothing, so nothing was checked: \(run)")
        }
    }

    // MARK: - credential_process

    func testBoto3UsesCredentialsAsCredentialProcess() async throws {
        try Self.requireBoto3()
        let pool = try await pool()
        XCTAssertEqual(try googleLogin(pool: pool).status, 0)

        let command = [harness.binary, "credentials", "--session", "alice", "--keystore", harness.keystore, "--expiry-margin", "0"]
            .map(Self.shellQuoted).joined(separator: " ")
        let config = try harness.write("""
            [profile alice]
            credential_process = \(command)
            region = us-east-1

            """, to: "aws-config")
        let script = try harness.write("""
            import json, sys
            import boto3
            session = boto3.Session(profile_name="alice")
            frozen = session.get_credentials().get_frozen_credentials()
            sts = session.client("sts", endpoint_url=sys.argv[1], region_name="us-east-1")
            identity = sts.get_caller_identity()
            print(json.dumps({
                "access_key": frozen.access_key,
                "secret_matches": frozen.secret_key == sys.argv[2],
                "token_matches": frozen.token == sys.argv[3],
                "account": identity.get("Account"),
            }))

            """, to: "check_boto3.py")
        let output = try Self.python([script, moto.endpoint, Self.motoSecret, Self.motoSessionToken], environment: [
            "AWS_CONFIG_FILE": config,
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true",
            "HOME": harness.directory,
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ])
        XCTAssertEqual(output.status, 0, "boto3 failed: \(output.stderr.suffix(800))")
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any], output.stdout)
        XCTAssertEqual(result["access_key"] as? String, Self.motoAccessKey)
        XCTAssertEqual(result["secret_matches"] as? Bool, true)
        XCTAssertEqual(result["token_matches"] as? Bool, true)
        XCTAssertNotNil(result["account"] as? String, "STS GetCallerIdentity answered")
    }

    func testBoto3UsesClassicFlowCredentials() async throws {
        try Self.requireBoto3()
        let pool = try await pool()
        let login = try googleLogin(pool: pool, extra: [
            "--flow", "classic", "--role-arn", "arn:aws:iam::123456789012:role/CliClassicInterop", "--duration", "900",
            "--sts-endpoint", moto.endpoint,
        ])
        XCTAssertEqual(login.status, 0, "\(login)")
        let printed = try Output.assertProcessShape(login.stdout)
        let accessKey = try XCTUnwrap(printed["AccessKeyId"] as? String)
        let secret = try XCTUnwrap(printed["SecretAccessKey"] as? String)
        let token = try XCTUnwrap(printed["SessionToken"] as? String)
        XCTAssertNotEqual(accessKey, Self.motoAccessKey, "STS's credentials, not Cognito's")
        harness.notOnStderr += [secret, token]
        let expiration = try XCTUnwrap(Output.parseISO8601(printed["Expiration"] as? String ?? ""))
        XCTAssertEqual(expiration.timeIntervalSinceNow, 900, accuracy: 60, "--duration reached STS")

        let command = [harness.binary, "credentials", "--session", "alice", "--keystore", harness.keystore]
            .map(Self.shellQuoted).joined(separator: " ")
        let config = try harness.write("""
            [profile alice]
            credential_process = \(command)
            region = us-east-1

            """, to: "aws-config-classic")
        let script = try harness.write("""
            import json, sys
            import boto3
            session = boto3.Session(profile_name="alice")
            frozen = session.get_credentials().get_frozen_credentials()
            sts = session.client("sts", endpoint_url=sys.argv[1], region_name="us-east-1")
            identity = sts.get_caller_identity()
            print(json.dumps({
                "access_key": frozen.access_key,
                "secret_matches": frozen.secret_key == sys.argv[2],
                "token_matches": frozen.token == sys.argv[3],
                "arn": identity.get("Arn"),
            }))

            """, to: "check_boto3_classic.py")
        let output = try Self.python([script, moto.endpoint, secret, token], environment: [
            "AWS_CONFIG_FILE": config,
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true",
            "HOME": harness.directory,
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ])
        XCTAssertEqual(output.status, 0, "boto3 failed: \(output.stderr.suffix(800))")
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any], output.stdout)
        XCTAssertEqual(result["access_key"] as? String, accessKey)
        XCTAssertEqual(result["secret_matches"] as? Bool, true)
        XCTAssertEqual(result["token_matches"] as? Bool, true)
        XCTAssertEqual(result["arn"] as? String, "arn:aws:sts::123456789012:assumed-role/CliClassicInterop/alice",
                       "moto's STS knows the caller as the assumed role")
    }

    func testBoto3ReportsAnExpiredSession() async throws {
        try Self.requireBoto3()
        let pool = try await pool()
        XCTAssertEqual(try googleLogin(pool: pool).status, 0)
        // With the default 120 s margin moto's 90 s credentials count as expired: exit 3, which boto3 surfaces.
        let command = [harness.binary, "credentials", "--session", "alice", "--keystore", harness.keystore]
            .map(Self.shellQuoted).joined(separator: " ")
        let config = try harness.write("[profile alice]\ncredential_process = \(command)\n", to: "aws-config-expired")
        let script = try harness.write("""
            import boto3
            try:
                boto3.Session(profile_name="alice").get_credentials().get_frozen_credentials()
            except Exception as error:
                print(type(error).__name__)
                print(str(error))

            """, to: "check_expired.py")
        let output = try Self.python([script], environment: [
            "AWS_CONFIG_FILE": config, "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true",
            "HOME": harness.directory, "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ])
        XCTAssertTrue(output.stdout.contains("CredentialRetrievalError"), output.stdout + output.stderr.suffix(400))
        XCTAssertTrue(output.stdout.contains("expired"), "boto3 shows federate's one-line reason: \(output.stdout)")
        XCTAssertFalse(output.stdout.contains(Self.motoSecret))
    }

    // MARK: - Helpers

    private static func shellQuoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }

    private static func requireBoto3() throws {
        let probe = try python(["-c", "import boto3"], environment: ProcessInfo.processInfo.environment)
        guard probe.status == 0 else {
            throw missingPrerequisite("boto3 cannot be imported (pip install boto3): \(probe.stderr.suffix(300))")
        }
    }

    private static func python(_ arguments: [String], environment: [String: String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3"] + arguments
        process.environment = environment
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("federate-py-\(UUID().uuidString).out")
        let err = FileManager.default.temporaryDirectory.appendingPathComponent("federate-py-\(UUID().uuidString).err")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        defer {
            try? FileManager.default.removeItem(at: out)
            try? FileManager.default.removeItem(at: err)
        }
        let outHandle = try FileHandle(forWritingTo: out)
        let errHandle = try FileHandle(forWritingTo: err)
        defer {
            try? outHandle.close()
            try? errHandle.close()
        }
        process.standardOutput = outHandle
        process.standardError = errHandle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(120)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)  // never SIGTERM: it may be blocked in the child
        }
        process.waitUntilExit()
        return (
            process.terminationStatus,
            (try? String(contentsOf: out, encoding: .utf8)) ?? "",
            (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        )
    }
}
