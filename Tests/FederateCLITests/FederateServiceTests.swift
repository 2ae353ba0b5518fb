import BrokerTestSupport
import Foundation
import XCTest

/// Login, output formats and exits 3, 4 and 5 against loopback stand-ins for the service.
final class FederateServiceTests: XCTestCase {
    private var harness: FederateHarness!

    override func setUpWithError() throws {
        harness = try FederateHarness()
        harness.notOnStderr = [FakeCognito.secretKey, FakeCognito.sessionToken]
    }

    override func tearDown() {
        harness?.cleanUp()
    }

    private func login(_ cognito: FakeCognito, session: String = "alice", extra: [String] = [], token: String = TestJWT.valid()) throws -> FederateRun {
        harness.neverPrinted.append(token)
        return try harness.run(
            ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-stdin", "--endpoint", cognito.endpoint, "--session", session] + extra,
            stdin: token + "\n")
    }

    func testLoginThenCredentialsInEveryFormat() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let login = try login(cognito)
        XCTAssertEqual(login.status, 0, "\(login)")
        XCTAssertEqual(login.stderr, "")
        let printed = try Output.assertProcessShape(login.stdout)
        XCTAssertEqual(printed["AccessKeyId"] as? String, FakeCognito.accessKeyId)

        let process = try harness.expect(0, ["credentials", "--session", "alice"])
        XCTAssertEqual(process.stderr, "")
        let object = try Output.assertProcessShape(process.stdout)
        XCTAssertEqual(object["AccessKeyId"] as? String, FakeCognito.accessKeyId)
        XCTAssertEqual(object["SecretAccessKey"] as? String, FakeCognito.secretKey)
        XCTAssertEqual(object["SessionToken"] as? String, FakeCognito.sessionToken)
        XCTAssertTrue(process.stdout.hasPrefix(#"{"Version":1,"AccessKeyId":"#), process.stdout.prefix(40).description)
        let expiration = try XCTUnwrap(Output.parseISO8601(object["Expiration"] as? String ?? ""))
        XCTAssertGreaterThan(expiration.timeIntervalSinceNow, 3000)
        XCTAssertLessThan(expiration.timeIntervalSinceNow, 3700)

        let json = try harness.expect(0, ["credentials", "--session", "alice", "--format", "json"])
        let jsonObject = try Output.assertProcessShape(json.stdout, extraKeys: ["IdentityId", "Provider", "Session"])
        XCTAssertEqual(jsonObject["IdentityId"] as? String, FakeCognito.defaultIdentityId)
        XCTAssertEqual(jsonObject["Provider"] as? String, "google")
        XCTAssertEqual(jsonObject["Session"] as? String, "alice")

        let env = try harness.expect(0, ["credentials", "--session", "alice", "--format", "env"])
        XCTAssertEqual(env.stdout, """
            export AWS_ACCESS_KEY_ID='\(FakeCognito.accessKeyId)'
            export AWS_SECRET_ACCESS_KEY='\(FakeCognito.secretKey)'
            export AWS_SESSION_TOKEN='\(FakeCognito.sessionToken)'

            """)
        XCTAssertEqual(env.stderr, "")

        let status = try harness.expect(0, ["status", "--session", "alice"])
        let state = try Output.jsonObject(status.stdout)
        XCTAssertEqual(Set(state.keys), ["session", "state", "identityId", "provider", "expiration"])
        XCTAssertEqual(state["state"] as? String, "federated")
        XCTAssertEqual(state["identityId"] as? String, FakeCognito.defaultIdentityId)
        XCTAssertEqual(state["provider"] as? String, "google")
        XCTAssertEqual(state["expiration"] as? String, object["Expiration"] as? String)
    }

    /// A secret that holds the shell's and JSON's special characters (the identity service's
    /// answer may be hostile) reads back exactly in every format.
    func testEveryFormatQuotesWhatTheServiceSent() throws {
        let secret = "it's $HOME `x` \"q\" \\ \",\"AccessKeyId\":\"EVIL"
        let cognito = try FakeCognito.served()
        cognito.setDefault(
            .credentials(
                identityId: FakeCognito.defaultIdentityId, accessKeyId: "AK", secretKey: secret, sessionToken: "ST",
                expiration: Date().addingTimeInterval(3600)),
            for: .getCredentialsForIdentity)
        defer { cognito.stopServing() }
        let result = try login(cognito, extra: ["--format", "env"])
        XCTAssertEqual(result.status, 0, "\(result)")
        let script = harness.directory + "/check.sh"
        try Data((result.stdout + "printf '%s' \"$AWS_SECRET_ACCESS_KEY\"\n").utf8).write(to: URL(fileURLWithPath: script))
        let shell = Process()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = [script]
        let pipe = Pipe()
        shell.standardOutput = pipe
        try shell.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        shell.waitUntilExit()
        XCTAssertEqual(String(decoding: output, as: UTF8.self), secret)
        for format in ["process", "json"] {
            let printed = try harness.expect(0, ["credentials", "--session", "alice", "--format", format])
            let object = try Output.jsonObject(printed.stdout)
            XCTAssertEqual(object["SecretAccessKey"] as? String, secret, format)
            XCTAssertEqual(object["AccessKeyId"] as? String, "AK", format)
        }
    }

    func testTokenFileWithTrailingNewlineIsSentWithoutIt() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let token = TestJWT.valid()
        harness.neverPrinted = [token]
        let path = try harness.write(token + "\n", to: "token")
        try harness.expect(0, ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-file", path, "--endpoint", cognito.endpoint])
        let getId = try XCTUnwrap(cognito.calls.first { $0.header("X-Amz-Target") == "AWSCognitoIdentityService.GetId" })
        let body = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(getId.body)) as? [String: Any])
        XCTAssertEqual((body["Logins"] as? [String: String])?["accounts.google.com"], token)
        XCTAssertEqual(body["IdentityPoolId"] as? String, FakeCognito.poolId)
    }

    func testDeveloperLoginWithIdentityIdSkipsGetId() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let developerId = "us-east-1:dddddddd-0000-0000-0000-000000000001"
        let token = TestJWT.valid(sub: developerId)
        harness.neverPrinted = [token]
        let result = try harness.expect(0, [
            "login", "--pool-id", FakeCognito.poolId, "--provider", "developer", "--identity-id", developerId,
            "--token-stdin", "--endpoint", cognito.endpoint, "--format", "json",
        ], stdin: token)
        let object = try Output.assertProcessShape(result.stdout, extraKeys: ["IdentityId", "Provider", "Session"])
        XCTAssertEqual(object["IdentityId"] as? String, developerId)
        XCTAssertEqual(object["Provider"] as? String, "developer")
        XCTAssertEqual(cognito.calls.map { $0.header("X-Amz-Target") }, ["AWSCognitoIdentityService.GetCredentialsForIdentity"])
    }

    func testCredentialsNeverCallTheNetwork() throws {
        let cognito = try FakeCognito.served()
        _ = try login(cognito)
        cognito.stopServing()
        let requestsBefore = cognito.calls.count
        // The service is gone, and the environment points elsewhere: credentials still come from the keystore.
        let result = try harness.expect(0, ["credentials", "--session", "alice", "--endpoint", "http://127.0.0.1:1/"],
                                        environment: ["AWS_ENDPOINT_URL": "not a url", "AWS_ENDPOINT_URL_COGNITO_IDENTITY": "http://127.0.0.1:1/"])
        try Output.assertProcessShape(result.stdout)
        XCTAssertEqual(cognito.calls.count, requestsBefore)
    }

    func testGuestThenStatus() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let guest = try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "visitor", "--format", "json"])
        let object = try Output.assertProcessShape(guest.stdout, extraKeys: ["IdentityId", "Provider", "Session"])
        XCTAssertEqual(object["Provider"] as? String, "guest")
        XCTAssertEqual(object["Session"] as? String, "visitor")
        let getId = try XCTUnwrap(cognito.calls.first)
        XCTAssertFalse(getId.bodyText.contains("Logins"), "a guest GetId carries no Logins")
        let status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "visitor"]).stdout)
        XCTAssertEqual(status["state"] as? String, "federated")
        XCTAssertEqual(status["provider"] as? String, "guest")
        // Again: the same guest identity, without GetId.
        let again = try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "visitor", "--format", "json"])
        XCTAssertEqual(try Output.assertProcessShape(again.stdout, extraKeys: ["IdentityId", "Provider", "Session"])["IdentityId"] as? String,
                       object["IdentityId"] as? String)
        XCTAssertEqual(cognito.calls.filter { $0.header("X-Amz-Target") == "AWSCognitoIdentityService.GetId" }.count, 1, "GetId ran again")
    }

    func testClearThenCredentialsExitsThree() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        XCTAssertEqual(try login(cognito).status, 0)
        XCTAssertEqual(try login(cognito, session: "bob").status, 0)
        try harness.expect(0, ["credentials", "--session", "alice"])
        let clear = try harness.expect(0, ["clear", "--session", "alice"])
        XCTAssertEqual(clear.stdout, "")
        try harness.expect(3, ["credentials", "--session", "alice"])
        let status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "alice"]).stdout)
        XCTAssertEqual(status["state"] as? String, "notFederated")
        try harness.expect(0, ["credentials", "--session", "bob"])  // other sessions untouched
    }

    func testExpiredSessionExitsThree() throws {
        // 90 s credentials, as moto issues, inside the default 120 s margin.
        let cognito = try FakeCognito.served(credentialLifetime: 90)
        defer { cognito.stopServing() }
        let login = try login(cognito)
        XCTAssertEqual(login.status, 0, "\(login)")
        try Output.assertProcessShape(login.stdout)
        XCTAssertTrue(login.stderr.contains("warning"), "login warns that the credentials are inside the margin: \(login)")
        let expired = try harness.expect(3, ["credentials", "--session", "alice"])
        // Not "expired at" a time still to come.
        XCTAssertTrue(expired.stderr.contains("within the expiry margin of 120 s, so they count as expired"), "\(expired)")
        try harness.expect(3, ["credentials", "--session", "alice", "--expiry-margin", "120"])
        let status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "alice"]).stdout)
        XCTAssertEqual(status["state"] as? String, "expired")
        // A smaller margin accepts them.
        try harness.expect(0, ["credentials", "--session", "alice", "--expiry-margin", "10"])
    }

    func testNotAuthorizedExitsFourAndKeepsThePreviousSession() throws {
        let healthy = try FakeCognito.served()
        defer { healthy.stopServing() }
        XCTAssertEqual(try login(healthy).status, 0)
        let rejecting = try FakeCognito.served()
        rejecting.setDefaultForAll(.error("NotAuthorizedException", message: "Invalid login token.", status: 400))
        defer { rejecting.stopServing() }
        let rejected = try login(rejecting)
        XCTAssertEqual(rejected.status, 4, "\(rejected)")
        harness.assertOneErrorLine(rejected)
        XCTAssertEqual(rejected.stdout, "")
        XCTAssertTrue(rejected.stderr.contains("NotAuthorized"), "\(rejected)")
        // Not retried: GetCredentialsForIdentity with the cached identity ID, then GetId once
        // (the library drops a cached ID the service rejects), and no more.
        XCTAssertEqual(rejecting.calls.count, 2)
        // A session with no cached ID: one GetId, rejected, not retried.
        let fresh = try login(rejecting, session: "fresh")
        XCTAssertEqual(fresh.status, 4, "\(fresh)")
        XCTAssertEqual(rejecting.calls.count, 3)
        try harness.expect(3, ["credentials", "--session", "fresh"])
        try harness.expect(0, ["credentials", "--session", "alice"])
    }

    func testServiceRejectionsExitFour() throws {
        for (type, status) in [("InvalidIdentityPoolConfigurationException", 400), ("ResourceNotFoundException", 400), ("InvalidParameterException", 400)] {
            let cognito = try FakeCognito.served()
            cognito.setDefaultForAll(.error(type, message: "no", status: status))
            defer { cognito.stopServing() }
            try harness.expect(4, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint])
        }
    }

    /// A 4xx that carries no AWS error type is not the service's answer (a web server's or a
    /// proxy's page at a wrong --endpoint): exit 5 pointing at the endpoint, not 4 about the
    /// token.
    func testAnAnswerWithoutAnAWSErrorTypeIsAWrongEndpoint() throws {
        // A 501 is not retried either: nothing about retries that ran out, or trying later.
        for status in [404, 501] {
            let cognito = try FakeCognito.served()
            cognito.setDefaultForAll(.init(status: status, headers: [(name: "Content-Type", value: "text/html")], body: Array("<html>No</html>".utf8)))
            defer { cognito.stopServing() }
            let result = try harness.expect(5, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint])
            XCTAssertTrue(result.stderr.contains("answered with no AWS error"), "\(result)")
            XCTAssertTrue(result.stderr.contains("--endpoint") && result.stderr.contains("HTTP \(status)"), "\(result)")
            XCTAssertFalse(result.stderr.contains("token"), "\(result)")
            XCTAssertFalse(result.stderr.contains("retries ran out") || result.stderr.contains("try again later"), "\(result)")
        }
    }

    /// The session's own identity gone: exit 4 and `terminated` until cleared. An identity
    /// ID given with `--identity-id` that is not the session's (a typo) fails the login
    /// alone, and the session keeps its credentials.
    func testTerminatedIdentityExitsFourUntilCleared() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let token = TestJWT.valid()
        harness.neverPrinted = [token]
        func login(_ identityId: String) throws {
            try harness.expect(4, ["login", "--pool-id", FakeCognito.poolId, "--provider", "developer", "--identity-id", identityId,
                                   "--token-stdin", "--endpoint", cognito.endpoint, "--session", "gone"], stdin: token)
        }
        try harness.expect(0, ["login", "--pool-id", FakeCognito.poolId, "--provider", "developer", "--identity-id", FakeCognito.defaultIdentityId,
                               "--token-stdin", "--endpoint", cognito.endpoint, "--session", "gone"], stdin: token)
        cognito.setDefault(.error("ResourceNotFoundException", message: "Identity not found", status: 400), for: .getCredentialsForIdentity)
        try login("us-east-1:00000000-0000-0000-0000-00000000abcd")
        var status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "gone"]).stdout)
        XCTAssertEqual(status["state"] as? String, "federated", "a mistyped --identity-id took the session's credentials")
        try harness.expect(0, ["credentials", "--session", "gone"])
        try login(FakeCognito.defaultIdentityId)
        status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "gone"]).stdout)
        XCTAssertEqual(status["state"] as? String, "terminated")
        let credentials = try harness.expect(4, ["credentials", "--session", "gone"])
        XCTAssertTrue(credentials.stderr.contains("clear"), "the error says what to do: \(credentials)")
        // exec runs nothing for it either (docs/cli.md: exit 4).
        let marker = harness.directory + "/ran"
        let exec = try harness.expect(4, ["exec", "--session", "gone", "--", "touch", marker])
        XCTAssertTrue(exec.stderr.contains("clear"), "the error says what to do: \(exec)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "exec ran its command for a terminated session")
        try harness.expect(0, ["clear", "--session", "gone"])
        try harness.expect(3, ["credentials", "--session", "gone"])
    }

    /// A loopback endpoint (plaintext allowed) is reached directly, whatever proxy the
    /// environment names: through the proxy, the token would cross the network in clear (and
    /// the proxy's own loopback would answer). The proxy here listens nowhere.
    func testALoopbackEndpointIsReachedWithoutTheEnvironmentsProxy() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let proxy: [String: String?] = [
            "http_proxy": "http://127.0.0.1:9/", "https_proxy": "http://127.0.0.1:9/", "ALL_PROXY": "http://127.0.0.1:9/",
            "all_proxy": "http://127.0.0.1:9/", "no_proxy": nil, "NO_PROXY": nil,
        ]
        try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint], environment: proxy)
        XCTAssertEqual(cognito.calls.count, 2, "GetId and GetCredentialsForIdentity reach the endpoint itself")
    }

    func testServiceUnavailableExitsFiveAfterRetries() throws {
        let cognito = try FakeCognito.served()
        cognito.setDefaultForAll(.error("ServiceUnavailableException", message: "down", status: 503))
        defer { cognito.stopServing() }
        let result = try harness.expect(5, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint])
        XCTAssertTrue(result.stderr.contains("try again"), "\(result)")
        XCTAssertEqual(cognito.calls.count, 3, "the default policy makes 3 attempts")
        try harness.expect(3, ["credentials"])
    }

    func testThrottlingExitsFive() throws {
        let cognito = try FakeCognito.served()
        cognito.setDefaultForAll(.error("TooManyRequestsException", message: "slow down", status: 429))
        defer { cognito.stopServing() }
        try harness.expect(5, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint])
    }

    func testClosedPortExitsFive() throws {
        let port = try freeLoopbackPort()
        try harness.expect(5, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", "http://127.0.0.1:\(port)/"])
    }

    func testUnwritableStdoutExitsOne() throws {
        guard FileManager.default.isWritableFile(atPath: "/dev/full") else { throw missingPrerequisite("no /dev/full") }
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        XCTAssertEqual(try login(cognito).status, 0)
        // A credential_process whose output is lost must not exit 0.
        let result = try harness.run(["credentials", "--session", "alice"], stdoutDevice: "/dev/full")
        XCTAssertEqual(result.status, 1, "\(result)")
        harness.assertOneErrorLine(result)
        XCTAssertTrue(result.stderr.contains("stdout"), "\(result)")
        // Help is output too.
        for arguments in [["--help"], ["login", "--help"]] {
            let help = try harness.run(arguments, stdoutDevice: "/dev/full")
            XCTAssertEqual(help.status, 1, "\(help)")
            harness.assertOneErrorLine(help)
        }
    }

    /// Standard output a pipe whose reader is gone (`federate credentials | consumer` where
    /// the consumer exited first): exit 1 with one line, not death by SIGPIPE (141) in
    /// silence. The launcher starts federate with SIGPIPE at its default, as a shell does.
    func testAStandardOutputPipeWithoutAReaderExitsOne() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        XCTAssertEqual(try login(cognito).status, 0)
        let result = try harness.run(["credentials", "--session", "alice"], launcher: [
            "python3", "-c", """
            import os, signal, sys
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            r, w = os.pipe()
            os.dup2(w, 1)
            os.close(r)
            os.close(w)
            os.execv(sys.argv[1], sys.argv[1:])
            """])
        XCTAssertEqual(result.status, 1, "\(result)")
        harness.assertOneErrorLine(result)
        XCTAssertTrue(result.stderr.contains("stdout"), "\(result)")
    }

    /// Standard descriptors closed at start (`>&-`, `2>&-`, `<&-`): the next file federate
    /// opens (the keystore's key, a new one at a first login) would take the closed number,
    /// and what federate writes to stdout or stderr would land in it. They are opened on
    /// /dev/null first: output to a closed stdout fails (exit 1) and nothing else is touched.
    func testClosedStandardDescriptorsAreNeverReused() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let token = TestJWT.valid()
        harness.neverPrinted.append(token)
        let tokenFile = try harness.write(token, to: "token")
        let closing = { (descriptors: String) in
            ["python3", "-c", "import os, sys\nfor fd in (\(descriptors)): os.close(fd)\nos.execv(sys.argv[1], sys.argv[1:])"]
        }
        // A first login, stdout and stdin closed: the new key file is opened for writing, the
        // transport's descriptors are made; its line for stdout reaches none of them.
        let login = try harness.run(
            ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-file", tokenFile, "--endpoint", cognito.endpoint,
             "--session", "alice"],
            launcher: closing("0, 1"))
        XCTAssertEqual(login.status, 1, "\(login)")
        XCTAssertTrue(login.stderr.contains("Bad file descriptor") && login.stderr.contains("the session was saved"), "\(login)")
        // Output to a closed stdout fails; stderr closed too, nothing else receives the line.
        let credentials = try harness.run(["credentials", "--session", "alice"], launcher: closing("1, 2"))
        XCTAssertEqual(credentials.status, 1, "\(credentials)")
        let status = try harness.run(["status", "--session", "alice"], launcher: closing("1,"))
        XCTAssertEqual(status.status, 1, "\(status)")
        XCTAssertTrue(status.stderr.contains("Bad file descriptor"), "\(status)")
        // The keystore is intact: its key and database opened and read as before.
        let after = try harness.expect(0, ["credentials", "--session", "alice"])
        XCTAssertTrue(after.stdout.contains("SecretAccessKey"), "\(after)")
        try harness.expect(0, ["status", "--session", "alice"])
    }

    /// The SQLite layout under `root`: `users/<uid>/` (0700) holding the key file and the
    /// service's database (both 0600).
    private func assertLayout(_ root: String, file: StaticString = #filePath, line: UInt = #line) {
        let directory = "\(root)/users/\(geteuid())"
        let database = "\(directory)/\(FederateHarness.base64URL(FederateHarness.service)).sqlite"
        for (path, mode) in [(root, 0o700), (directory, 0o700), (directory + "/key", 0o600), (database, 0o600)] as [(String, mode_t)] {
            var info = stat()
            XCTAssertEqual(lstat(path, &info), 0, "missing \(path)", file: file, line: line)
            XCTAssertEqual(info.st_mode & 0o7777, mode, path, file: file, line: line)
        }
    }

    func testDefaultKeystoreLocations() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let guest = ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint]
        // $HOME/.local/share/identity-broker
        try harness.expect(0, guest, environment: ["IDENTITY_BROKER_KEYSTORE": nil])
        assertLayout(harness.directory + "/.local/share/identity-broker")
        try harness.expect(0, ["credentials"], environment: ["IDENTITY_BROKER_KEYSTORE": nil])
        // $XDG_DATA_HOME/identity-broker
        let xdg = harness.directory + "/xdg"
        try harness.expect(3, ["credentials"], environment: ["IDENTITY_BROKER_KEYSTORE": nil, "XDG_DATA_HOME": xdg])
        try harness.expect(0, guest, environment: ["IDENTITY_BROKER_KEYSTORE": nil, "XDG_DATA_HOME": xdg])
        assertLayout(xdg + "/identity-broker")
        // $IDENTITY_BROKER_KEYSTORE wins over both; --keystore over all.
        try harness.expect(3, ["credentials"], environment: ["XDG_DATA_HOME": xdg])
        try harness.expect(0, ["credentials", "--keystore", xdg + "/identity-broker"])
    }
}
