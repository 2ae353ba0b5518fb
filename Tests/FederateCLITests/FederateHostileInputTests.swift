import BrokerTestSupport
import Foundation
import XCTest

/// The attack review's findings outside the keystore, through the `federate` binary:
/// crafted tokens, echoed token fragments, plaintext endpoints, bad session names and
/// a guest over a login.
final class FederateHostileInputTests: XCTestCase {
    private var harness: FederateHarness!

    override func setUpWithError() throws {
        harness = try FederateHarness()
        harness.notOnStderr = [FakeCognito.secretKey, FakeCognito.sessionToken]
    }

    override func tearDown() {
        harness?.cleanUp()
    }

    private func login(endpoint: String, token: String, session: String = "alice", extra: [String] = [], environment: [String: String?] = [:]) throws -> FederateRun {
        harness.neverPrinted.append(token)
        return try harness.run(
            ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-stdin", "--endpoint", endpoint, "--session", session] + extra,
            stdin: token + "\n", environment: environment)
    }

    // MARK: 1. A crafted JWT

    /// `"exp": -1e19` once trapped an `Int` conversion (SIGILL, exit 132, a backtrace).
    func testAnExpClaimBeyondIntIsExitTwoInOneLine() throws {
        let cognito = try FakeCognito.served()
        for exp in ["-1e19", "1e19", "-9.3e18", "1.7976931348623157e308", "-1.7976931348623157e308"] {
            let token = TestJWT.make(headerJSON: #"{"alg":"RS256"}"#, payloadJSON: #"{"sub":"s","exp":\#(exp)}"#)
            let run = try login(endpoint: cognito.endpoint, token: token)
            if exp.hasPrefix("-") {
                XCTAssertEqual(run.status, 2, "exp \(exp): \(run)")
                harness.assertOneErrorLine(run)
                XCTAssertTrue(run.stderr.contains("expired"), run.stderr)
            } else {
                XCTAssertEqual(run.status, 0, "a token valid far into the future is sent: exp \(exp): \(run)")
            }
        }
        let exchanges = cognito.calls(.getCredentialsForIdentity)
        XCTAssertEqual(exchanges.count, 2, "only the two future tokens reached the service")
    }

    // MARK: 2. Echoed token fragments

    func testFragmentsOfTheTokenEchoedByTheServiceNeverReachStderr() throws {
        let token = TestJWT.valid()
        let parts = token.split(separator: ".").map(String.init)
        let echoes: [(String, [(String, String)], String)] = [
            ("first 150 characters", [], #"{"__type":"NotAuthorizedException","message":"Invalid login token \#(token.prefix(150))"}"#),
            ("signature alone", [], #"{"__type":"NotAuthorizedException","message":"signature \#(parts[2]) rejected"}"#),
            ("upper-cased", [], #"{"__type":"NotAuthorizedException","Message":"TOKEN \#(token.uppercased())"}"#),
            ("error-type header", [("x-amzn-ErrorType", "NotAuthorizedException:\(token)")], #"{"message":"no"}"#),
        ]
        for (what, headers, body) in echoes {
            let cognito = try FakeCognito.served()
            cognito.setDefaultForAll(.raw(status: 400, headers: [("Content-Type", "application/x-amz-json-1.1")] + headers, body: body))
            let run = try login(endpoint: cognito.endpoint, token: token)
            XCTAssertEqual(run.status, 4, "\(what): \(run)")
            harness.assertOneErrorLine(run)
            XCTAssertNil(leakedRun(in: run.stderr, of: [token] + parts), "\(what): \(run.stderr)")
        }
    }

    // MARK: 3. Plaintext endpoints

    /// A plaintext endpoint to a non-loopback host is refused before anything is sent.
    /// The proxy variable routes any request to a loopback recorder, so "nothing sent"
    /// is observed, and the opt-in shows the same setup does send.
    func testPlaintextToANonLoopbackHostIsRefusedUnlessOptedIn() throws {
        let recorder = try FakeCognito.served()
        let proxy = ["http_proxy": recorder.endpoint, "HTTP_PROXY": recorder.endpoint, "no_proxy": "", "NO_PROXY": ""]
        let token = TestJWT.valid()
        let refused = try login(endpoint: "http://cognito.example/", token: token, environment: proxy)
        XCTAssertEqual(refused.status, 2, "\(refused)")
        harness.assertOneErrorLine(refused)
        XCTAssertTrue(refused.stderr.contains("--allow-insecure-endpoint"), refused.stderr)
        for variable in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_COGNITO_IDENTITY"] {
            var environment = proxy
            environment[variable] = "http://cognito.example/"
            let run = try harness.run(
                ["guest", "--pool-id", FakeCognito.poolId, "--session", "g"], environment: environment)
            XCTAssertEqual(run.status, 2, "\(variable): \(run)")
            XCTAssertTrue(run.stderr.contains(variable), run.stderr)
        }
        XCTAssertEqual(recorder.calls.count, 0, "nothing was sent")

        let allowed = try login(endpoint: "http://cognito.example/", token: token, extra: ["--allow-insecure-endpoint"], environment: proxy)
        XCTAssertEqual(allowed.status, 0, "\(allowed)")
        XCTAssertGreaterThan(recorder.calls.count, 0, "with the opt-in the request goes out (through the proxy)")
    }

    // MARK: 4. Session names

    /// A FIFO as --token-file or --policy-file: no writer means exit 2 after a bounded wait,
    /// not a hang (opening a FIFO blocks until a writer comes); a writer that comes late is read.
    func testAFIFOAsATokenOrPolicyFileNeverHangs() throws {
        let fifo = harness.directory + "/token.fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let login = ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--endpoint", "http://127.0.0.1:9/", "--token-file", fifo]
        let run = try harness.expect(2, login)
        XCTAssertTrue(run.stderr.contains("within 10 seconds"), run.stderr)

        let policy = harness.directory + "/policy.fifo"
        XCTAssertEqual(mkfifo(policy, 0o600), 0)
        let token = try harness.write(TestJWT.valid(), to: "token")
        try harness.expect(2, [
            "login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--endpoint", "http://127.0.0.1:9/",
            "--token-file", token, "--flow", "classic", "--role-arn", "arn:aws:iam::123456789012:role/R", "--policy-file", policy,
        ])

        // A writer that opens the FIFO after federate does, writes and closes: read as a file.
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let writer = Thread {
            Thread.sleep(forTimeInterval: 0.5)
            let descriptor = open(fifo, O_WRONLY)
            let bytes = Array(TestJWT.valid().utf8)
            _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            close(descriptor)
        }
        writer.start()
        try harness.expect(0, ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--endpoint", cognito.endpoint, "--token-file", fifo])
    }

    /// `--token-stdin` on a pipe that never ends (the token written, the write end kept open:
    /// a command that keeps running, an inherited pipe): exit 2 after a bounded wait, not a
    /// hang, and nothing sent.
    func testATokenOnStandardInputThatNeverEndsIsExitTwoNotAHang() throws {
        let fifo = harness.directory + "/stdin.fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        // federate's standard input is the FIFO opened read-write: its own open write end
        // keeps the pipe from ever reaching its end.
        let login = ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--endpoint", cognito.endpoint, "--token-stdin"]
        let launcher = ["sh", "-c", #"exec 3<>"$STDIN_FIFO"; printf %s "$TOKEN" >&3; unset TOKEN; exec "$0" "$@" <&3"#]
        let started = Date()
        let run = try harness.run(
            login, environment: ["STDIN_FIFO": fifo, "TOKEN": TestJWT.valid(), "IDENTITY_BROKER_STDIN_TIMEOUT": "2"], timeout: 60, launcher: launcher)
        XCTAssertEqual(run.status, 2, "\(run)")
        XCTAssertTrue(run.stderr.contains("nothing finished writing standard input within 2 seconds"), run.stderr)
        XCTAssertTrue(run.stderr.contains("IDENTITY_BROKER_STDIN_TIMEOUT=SECONDS"), run.stderr)
        harness.assertOneErrorLine(run)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 1.9, "it did not wait for the token's writer")
        XCTAssertEqual(cognito.calls.count, 0)
        for bad in ["-1", "soon", "86401"] {
            let refused = try harness.expect(2, login, stdin: TestJWT.valid(), environment: ["IDENTITY_BROKER_STDIN_TIMEOUT": bad])
            XCTAssertTrue(refused.stderr.contains("IDENTITY_BROKER_STDIN_TIMEOUT must be a whole number of seconds"), "\(refused)")
        }
        XCTAssertEqual(cognito.calls.count, 0)
        // A writer that closes is read at once, with no limit too.
        try harness.expect(0, login, stdin: TestJWT.valid(), environment: ["IDENTITY_BROKER_STDIN_TIMEOUT": "0"])
    }

    /// A usage error in the options is reported before the token is read and before the key
    /// variables are looked at: on a standard input that never ends, it does not wait for the
    /// token (exit 2 naming the pool ID, not the stdin timeout), and a malformed key does not
    /// turn it into a keystore error (6).
    func testOptionErrorsComeBeforeTheTokenAndTheKey() throws {
        let fifo = harness.directory + "/stdin.fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let launcher = ["sh", "-c", #"exec 3<>"$STDIN_FIFO"; exec "$0" "$@" <&3"#]
        for (pool, endpoint) in [("not-a-pool", cognito.endpoint), (FakeCognito.poolId, "ftp://127.0.0.1/")] {
            let login = ["login", "--pool-id", pool, "--provider", "google", "--endpoint", endpoint, "--token-stdin"]
            let run = try harness.run(
                login, environment: ["STDIN_FIFO": fifo, "IDENTITY_BROKER_STDIN_TIMEOUT": "30", "IDENTITY_BROKER_KEY": "not-base64"],
                timeout: 20, launcher: launcher)
            XCTAssertEqual(run.status, 2, "\(run)")
            harness.assertOneErrorLine(run)
            XCTAssertTrue(run.stderr.contains(pool == FakeCognito.poolId ? "ftp://" : "identity pool ID"), "names the bad option: \(run.stderr)")
            let guest = try harness.run(
                ["guest", "--pool-id", pool, "--endpoint", endpoint], environment: ["IDENTITY_BROKER_KEY": "not-base64"])
            XCTAssertEqual(guest.status, 2, "\(guest)")
            XCTAssertEqual(guest.stderr, run.stderr, "guest and login say the same")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "a usage error created the keystore")
        XCTAssertEqual(cognito.calls.count, 0)
    }

    func testEveryCommandRejectsBadSessionNames() throws {
        let cognito = try FakeCognito.served()
        let names = ["../x", "/", String(repeating: "a", count: 129), "a\nb", "..", "a b", "é"]
        for name in names {
            for arguments in [
                ["status", "--session", name],
                ["credentials", "--session", name],
                ["clear", "--session", name],
                ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", name],
            ] {
                let run = try harness.run(arguments)
                XCTAssertEqual(run.status, 2, "\(run)")
                harness.assertOneErrorLine(run)
            }
        }
        XCTAssertEqual(cognito.calls.count, 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "nothing was created for a bad name")
    }

    // MARK: 5. A guest over a login

    func testGuestOnASessionThatHoldsALoginIsExitTwoAndSaysToClear() throws {
        let cognito = try FakeCognito.served()
        XCTAssertEqual(try login(endpoint: cognito.endpoint, token: TestJWT.valid()).status, 0)
        let guest = try harness.expect(2, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "alice"])
        XCTAssertEqual(
            guest.stderr,
            "federate: session 'alice' holds an authenticated identity; a guest identity would replace it, "
                + "so run 'federate clear' with the same --session first, then try again\n", "said once, in the command's words")
        // The login is intact.
        XCTAssertEqual(try harness.run(["credentials", "--session", "alice"]).status, 0)
    }
}
