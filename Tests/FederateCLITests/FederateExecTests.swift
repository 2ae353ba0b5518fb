import BrokerTestSupport
import Federation
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// `federate exec` and `federate serve` with real consumers: a Python child reading the
/// endpoint with urllib, shells, and (in ``FederateExecMotoTests``) boto3 and the AWS CLI.
final class FederateExecTests: XCTestCase {
    private var harness: FederateHarness!

    override func setUpWithError() throws {
        harness = try FederateHarness()
        harness.notOnStderr = [FakeCognito.secretKey, FakeCognito.sessionToken]
    }

    override func tearDown() {
        harness?.cleanUp()
    }

    /// A Cognito stand-in whose every GetCredentialsForIdentity answers new credentials
    /// (access key ``FakeCognito/accessKeyId(_:)`` N), expiring `lifetime` seconds later.
    private func countingCognito(lifetime: TimeInterval = 3600) throws -> FakeCognito {
        try FakeCognito.served(credentialLifetime: lifetime, numbersCredentials: true)
    }

    @discardableResult
    private func login(_ cognito: FakeCognito, session: String = "alice", extra: [String] = []) throws -> FederateRun {
        let token = TestJWT.valid(sub: "user-\(session)")
        harness.neverPrinted.append(token)
        return try harness.expect(0, [
            "login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-stdin", "--endpoint", cognito.endpoint, "--session", session,
        ] + extra, stdin: token)
    }

    // MARK: - The child's fetches follow the store

    /// The child fetches the endpoint with urllib (the Authorization header from its
    /// environment) before and after a `federate login` and a `federate clear` in another
    /// process; without the token, and with a wrong one, it is refused.
    func testChildFetchSeesPushedTokenThenClearedSession() throws {
        let cognito = try countingCognito()
        try login(cognito)
        let script = try harness.write("""
            import json, os, sys, time, urllib.request, urllib.error

            def fetch(authorization):
                request = urllib.request.Request(os.environ["AWS_CONTAINER_CREDENTIALS_FULL_URI"])
                if authorization is not None:
                    request.add_header("Authorization", authorization)
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        return {"status": response.status, "body": json.load(response)}
                except urllib.error.HTTPError as error:
                    return {"status": error.code, "body": json.load(error)}

            def wait_for(path):
                while not os.path.exists(path):
                    time.sleep(0.01)

            token = os.environ["AWS_CONTAINER_AUTHORIZATION_TOKEN"]
            print(json.dumps(fetch(token)), flush=True)
            print(json.dumps(fetch(None)), flush=True)
            print(json.dumps(fetch("0" * 64)), flush=True)
            wait_for(sys.argv[1])
            print(json.dumps(fetch(token)), flush=True)
            wait_for(sys.argv[2])
            print(json.dumps(fetch(token)), flush=True)

            """, to: "fetch_twice.py")
        let afterLogin = harness.directory + "/after-login"
        let afterClear = harness.directory + "/after-clear"
        let exec = try BackgroundFederate(harness, ["exec", "--session", "alice", "--", "python3", script, afterLogin, afterClear])

        var lines = exec.waitForLines(3)
        guard lines.count >= 3 else { return }
        let first = try Self.json(lines[0])
        XCTAssertEqual(first["status"] as? Int, 200)
        let firstBody = first["body"] as? [String: Any] ?? [:]
        XCTAssertEqual(firstBody["AccessKeyId"] as? String, FakeCognito.accessKeyId(1))
        XCTAssertEqual(firstBody["SecretAccessKey"] as? String, FakeCognito.secretKey)
        XCTAssertEqual(firstBody["Token"] as? String, FakeCognito.sessionToken)
        XCTAssertNotNil(Output.parseISO8601(firstBody["Expiration"] as? String ?? ""))
        for (index, status) in [(1, 401), (2, 403)] {
            let refused = try Self.json(lines[index])
            XCTAssertEqual(refused["status"] as? Int, status, lines[index])
            XCTAssertFalse(lines[index].contains(FakeCognito.secretKey), lines[index])
            XCTAssertFalse(lines[index].contains("ASIALOGIN"), lines[index])
        }

        // Pushed from another process while the child runs: its next fetch gets it.
        try login(cognito)
        _ = FileManager.default.createFile(atPath: afterLogin, contents: nil)
        lines = exec.waitForLines(4)
        guard lines.count >= 4 else { return }
        let second = try Self.json(lines[3])
        XCTAssertEqual(second["status"] as? Int, 200)
        XCTAssertEqual((second["body"] as? [String: Any])?["AccessKeyId"] as? String, FakeCognito.accessKeyId(2))

        // Cleared from another process: the next fetch fails, with no credentials.
        try harness.expect(0, ["clear", "--session", "alice"])
        _ = FileManager.default.createFile(atPath: afterClear, contents: nil)
        lines = exec.waitForLines(5)
        guard lines.count >= 5 else { return }
        let third = try Self.json(lines[4])
        XCTAssertEqual(third["status"] as? Int, 404, lines[4])
        XCTAssertEqual((third["body"] as? [String: Any])?["code"] as? String, "NoValidCredentials")
        XCTAssertFalse(lines[4].contains(FakeCognito.secretKey))

        XCTAssertEqual(exec.waitForExit(), 0, exec.stderr)
        XCTAssertEqual(exec.stderr, "", "exec is quiet")
    }

    // MARK: - The child's environment and signals

    func testChildEnvironmentHasTheEndpointAndNoOtherCredentials() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "bob")
        let script = try harness.write(pythonOpenDescriptors + """
            import json, os
            names = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                     "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                     "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ACCESS_KEY",
                     "AWS_SECRET_KEY", "AWS_SECURITY_TOKEN", "IDENTITY_BROKER_KEY_FILE", "AWS_CREDENTIAL_FILE", "BOTO_CONFIG",
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_REGION", "KEEP_ME", "IDENTITY_BROKER_KEYSTORE",
                     "AWS_EC2_METADATA_DISABLED"]
            print(json.dumps({
                "env": {name: os.environ.get(name) for name in names},
                "token_length": len(os.environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN", "")),
                "inherited_fds": open_descriptors(),
            }))

            """, to: "env.py")
        let run = try harness.run(["exec", "--session", "bob", "--", "python3", script], environment: [
            "AWS_ACCESS_KEY_ID": "AKIASTATICKEY", "AWS_SECRET_ACCESS_KEY": "static-secret", "AWS_SESSION_TOKEN": "static-token",
            "AWS_PROFILE": "other", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/x",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "/nonexistent", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.2/x",
            "AWS_REGION": "eu-west-1", "KEEP_ME": "yes",
            // The SDKs' other sources that come before the container provider.
            "AWS_DEFAULT_PROFILE": "other", "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token", "AWS_ROLE_ARN": "arn:aws:iam::1:role/pod",
            "AWS_ACCESS_KEY": "AKIAOLDSPELLING", "AWS_SECRET_KEY": "old-secret", "AWS_SECURITY_TOKEN": "old-token",
            "AWS_CREDENTIAL_FILE": "/etc/legacy-credentials", "BOTO_CONFIG": "/etc/boto.cfg",
            // What locates the broker's own key (a directory keystore ignores it; the child must not see it either).
            "IDENTITY_BROKER_KEY_FILE": "/nonexistent/key",
        ], launcher: onlyDescriptor7Launcher)
        XCTAssertEqual(run.status, 0, "\(run)")
        let object = try Self.json(run.stdout.trimmingCharacters(in: .newlines))
        let env = object["env"] as? [String: Any] ?? [:]
        for name in [
            "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
            "AWS_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SECURITY_TOKEN", "IDENTITY_BROKER_KEY_FILE", "AWS_CREDENTIAL_FILE", "BOTO_CONFIG",
        ] {
            XCTAssertTrue(env[name] is NSNull, "\(name) reached the child")
        }
        // A keystore directory is no secret (a postgres:// URL is: FederatePostgresTests).
        XCTAssertEqual(env["IDENTITY_BROKER_KEYSTORE"] as? String, harness.keystore)
        // Only standard input, output and error: not the server's listening socket or epoll.
        // Started with 7 open on /dev/null and nothing else (the launcher): 7 passes on, as a
        // `<(…)` pipe or make's jobserver must, and nothing federate opened reaches the command.
        XCTAssertEqual(object["inherited_fds"] as? [String: String], ["7": "/dev/null"], "descriptors leaked into the command, or an inherited one did not pass on")
        let url = env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] as? String ?? ""
        XCTAssertNotNil(url.range(of: #"^http://127\.0\.0\.1:\d+/credentials/bob$"#, options: .regularExpression), url)
        XCTAssertEqual(object["token_length"] as? Int, 64)
        XCTAssertEqual(env["AWS_REGION"] as? String, "eu-west-1")
        XCTAssertEqual(env["KEEP_ME"] as? String, "yes")
        // No fallback to the instance's role when the endpoint answers no credentials
        // (Java's and .NET's chains), unless the caller chose otherwise.
        XCTAssertEqual(env["AWS_EC2_METADATA_DISABLED"] as? String, "true")
        let printMetadataSetting = ["--", "sh", "-c", "printf %s \"$AWS_EC2_METADATA_DISABLED\""]
        let chosen = try harness.run(["exec", "--session", "bob"] + printMetadataSetting, environment: ["AWS_EC2_METADATA_DISABLED": "false"])
        XCTAssertEqual(chosen.status, 0, "\(chosen)")
        XCTAssertEqual(chosen.stdout, "false")
        let empty = try harness.run(["exec", "--session", "bob"] + printMetadataSetting, environment: ["AWS_EC2_METADATA_DISABLED": ""])
        XCTAssertEqual(empty.stdout, "true", "an empty value decides nothing: \(empty)")

        // The command itself (grep, which changes no disposition) reads its signal state:
        // nothing blocked or ignored, although federate runs it from a Swift concurrency
        // thread and ignores or traps SIGPIPE, SIGINT, SIGTERM and SIGHUP itself.
        let signals = try harness.run(["exec", "--session", "bob", "--", "grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"])
        XCTAssertEqual(signals.status, 0, "\(signals)")
        var masks: [String: UInt64] = [:]
        for line in signals.stdout.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            masks[String(parts[0])] = UInt64(parts[1].trimmingCharacters(in: .whitespaces), radix: 16)
        }
        XCTAssertEqual(masks["SigBlk"], 0, signals.stdout)
        // Signals 1 to 31; glibc's posix_spawn leaves its two internal real-time signals
        // (32, 33) ignored in every child it starts from a threaded process.
        XCTAssertEqual(masks["SigIgn"].map { $0 & 0x7FFF_FFFF }, 0, signals.stdout)

        // Job-control signals federate was started with ignored (`nohup`, a script's
        // background job) stay ignored in the command, and a SIGHUP sent to federate then ends
        // neither; an ignored SIGPIPE (a runtime's own) does not leak into the command.
        let ignoring = ["sh", "-c", "trap '' HUP INT PIPE; exec \"$@\"", "sh"]
        let kept = try harness.run(["exec", "--session", "bob", "--", "grep", "^SigIgn:", "/proc/self/status"], launcher: ignoring)
        XCTAssertEqual(kept.status, 0, "\(kept)")
        let ignored = UInt64(kept.stdout.dropFirst("SigIgn:".count).trimmingCharacters(in: .whitespacesAndNewlines), radix: 16)
        XCTAssertEqual(ignored.map { $0 & 0x7FFF_FFFF }, 0b11, "SIGHUP and SIGINT ignored, nothing else: \(kept.stdout)")
        let hungUp = try harness.run(
            ["exec", "--session", "bob", "--", "sh", "-c", "kill -HUP $PPID; sleep 0.3; echo survived"], launcher: ignoring)
        XCTAssertEqual(hungUp.status, 0, "\(hungUp)")
        XCTAssertEqual(hungUp.stdout, "survived\n")
    }

    /// Kernels before 5.9 have no `close_range` (a seccomp filter stands in for one here): the
    /// command's start then closes what `/proc/self/fd` lists, with the same outcome.
    func testOnlyInheritedDescriptorsReachTheCommandWithoutCloseRange() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "bob")
        let script = try harness.write(pythonOpenDescriptors + """
            import json
            print(json.dumps({"inherited_fds": open_descriptors()}))

            """, to: "descriptors.py")
        let launcher = seccompLauncher(failing: [.closeRange])
        let run = try harness.run(["exec", "--session", "bob", "--", "python3", script], launcher: launcher + onlyDescriptor7Launcher)
        XCTAssertEqual(run.status, 0, "\(run)")
        let object = try Self.json(run.stdout.trimmingCharacters(in: .newlines))
        XCTAssertEqual(object["inherited_fds"] as? [String: String], ["7": "/dev/null"], "descriptors leaked into the command, or an inherited one did not pass on")
        // The child's report of a command it could not run still reaches federate.
        let notExecutable = try harness.write("echo hi\n", to: "not-executable.sh")
        let denied = try harness.run(["exec", "--session", "bob", "--", notExecutable], launcher: launcher)
        XCTAssertEqual(denied.status, 126, "\(denied)")
        harness.assertOneErrorLine(denied)
        XCTAssertTrue(denied.stderr.contains("check that it is an executable file"), denied.stderr)
    }

    /// Without `close_range` and without a readable `/proc`, the child closes every number up
    /// to its descriptor limit: still only the inherited descriptor reaches the command.
    func testOnlyInheritedDescriptorsReachTheCommandWithoutCloseRangeOrProc() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "bob")
        // Not Python, which cannot start without listing directories: dash's `[` is built in
        // and `-c` opens no script, so what /proc/self/fd shows is what the command inherited.
        let listing = #"for fd in $(seq 3 4095); do if [ -e /proc/self/fd/$fd ]; then echo "$fd=$(readlink /proc/$$/fd/$fd)"; fi; done"#
        // fd 7's launcher starts first (Python cannot start under the filter); it runs the
        // filter's through env, since it takes a path.
        let launcher = onlyDescriptor7Launcher + ["/usr/bin/env"] + seccompLauncher(failing: [.closeRange, .directoryListing])
        let run = try harness.run(["exec", "--session", "bob", "--", "/bin/sh", "-c", listing], launcher: launcher)
        XCTAssertEqual(run.status, 0, "\(run)")
        XCTAssertEqual(run.stdout, "7=/dev/null\n", "descriptors leaked into the command, or an inherited one did not pass on")
    }

    /// A system that cannot start one more process (a process limit, overcommit refusing the
    /// fork) is no fault of the command: exit 126, one line that says so, nothing run.
    func testACommandTheSystemCannotStartIsReportedAsSuch() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        let marker = harness.directory + "/ran"
        let run = try harness.run(["exec", "--", "sh", "-c", "touch \(marker)"], launcher: seccompLauncher(failing: [.fork]))
        XCTAssertEqual(run.status, 126, "\(run)")
        harness.assertOneErrorLine(run)
        XCTAssertTrue(run.stderr.contains("cannot start 'sh': Resource temporarily unavailable (while preparing its process); nothing was run"), run.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker))
    }

    func testExitStatusOfTheCommandPropagates() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        XCTAssertEqual(try harness.run(["exec", "--", "sh", "-c", "exit 0"]).status, 0)
        XCTAssertEqual(try harness.run(["exec", "--", "sh", "-c", "exit 7"]).status, 7)
        XCTAssertEqual(try harness.run(["exec", "--", "sh", "-c", "exit 255"]).status, 255)
        XCTAssertEqual(try harness.run(["exec", "--", "sh", "-c", "kill -TERM $$"]).status, 128 + SIGTERM)
        XCTAssertEqual(try harness.run(["exec", "--", "sh", "-c", "kill -KILL $$"]).status, 128 + SIGKILL)
        let missing = try harness.run(["exec", "--", "no-such-command-\(UUID().uuidString.prefix(6))"])
        XCTAssertEqual(missing.status, 127, "\(missing)")
        harness.assertOneErrorLine(missing)
        let notExecutable = try harness.write("echo hi\n", to: "not-executable.sh")
        let denied = try harness.run(["exec", "--", notExecutable])
        XCTAssertEqual(denied.status, 126, "\(denied)")
        let stdin = try harness.run(["exec", "--", "sh", "-c", "echo out; echo err >&2; exit 3"])
        XCTAssertEqual(stdin.status, 3)
        XCTAssertEqual(stdin.stdout, "out\n", "the command's output passes through")
        XCTAssertEqual(stdin.stderr, "err\n")
    }

    /// A file name in Latin-1, a byte pattern: the command gets its arguments and environment
    /// byte for byte, through `federate`'s hand-over to `federate-server` as well. Swift's
    /// `CommandLine.arguments` and `String(cString:)` would turn each byte into U+FFFD.
    func testArgumentsAndEnvironmentThatAreNotUTF8ReachTheCommandUnchanged() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        // The launcher (a shell) adds what no Swift String holds: a variable, and a last argument.
        let launcher = ["sh", "-c", #"export RAW_VALUE="$(printf 'caf\351\377')"; exec "$@" "$(printf 'r\351sum\351.txt')""#, "sh"]
        let dump = #"printf %s "$1" | od -An -tx1; printf %s "$RAW_VALUE" | od -An -tx1"#
        let run = try harness.run(["exec", "--", "sh", "-c", dump, "sh"], launcher: launcher)
        XCTAssertEqual(run.status, 0, "\(run)")
        let lines = run.stdout.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }
        XCTAssertEqual(lines, ["72 e9 73 75 6d e9 2e 74 78 74", "63 61 66 e9 ff"], run.stdout)
    }

    func testSignalsAreForwardedToTheCommand() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        let script = #"trap 'exit 42' TERM; trap 'exit 43' INT; trap 'exit 44' HUP; trap 'exit 45' QUIT; trap 'exit 46' USR1; trap 'exit 47' USR2; trap 'exit 48' ALRM; echo ready; while :; do sleep 1 & wait $!; done"#
        // Past the stops, the signals a supervisor sends to ask for something: each would end
        // federate untrapped, leaving the command with an endpoint that is gone.
        for (signal, expected) in [(SIGTERM, Int32(42)), (SIGINT, 43), (SIGHUP, 44), (SIGQUIT, 45), (SIGUSR1, 46), (SIGUSR2, 47), (SIGALRM, 48)] {
            let exec = try BackgroundFederate(harness, ["exec", "--", "sh", "-c", script])
            XCTAssertEqual(exec.waitForLines(1).first, "ready")
            exec.signal(signal)
            XCTAssertEqual(exec.waitForExit(), expected, "signal \(signal): \(exec.stderr)")
        }
        // A command that does not catch the signal dies of it: 128 + signal.
        let exec = try BackgroundFederate(harness, ["exec", "--", "sh", "-c", "echo ready; while :; do sleep 1; done"])
        XCTAssertEqual(exec.waitForLines(1).first, "ready")
        exec.signal(SIGTERM)
        XCTAssertEqual(exec.waitForExit(), 128 + SIGTERM, exec.stderr)
    }

    /// The binding to `federate` follows the thread that forked, so that thread lives as long
    /// as the command: a command that runs longer than an idle thread of Swift's pool lives
    /// (libdispatch lets one go after 5 s) is not killed with it.
    func testACommandOutlivesAnIdleThreadsLifetime() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        let run = try harness.run(["exec", "--", "sh", "-c", "sleep 7; echo alive"])
        XCTAssertEqual(run.status, 0, "\(run)")
        XCTAssertEqual(run.stdout, "alive\n")
    }

    /// `federate` killed with SIGKILL (or by the OOM killer) can neither stop nor warn its
    /// command, whose SDK would then ask the endpoint's port for its next credentials: once
    /// the port is free, any local user could listen there and answer with credentials of
    /// their own. The command is bound to `federate` and dies with it.
    func testTheCommandDiesWithAKilledFederate() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        let exec = try BackgroundFederate(harness, ["exec", "--", "sh", "-c", "echo $$; while :; do sleep 0.1; done"])
        let command = try XCTUnwrap(exec.waitForLines(1).first.flatMap { pid_t($0) })
        // The command's start time tells it from a later process given the same ID.
        let started = try XCTUnwrap(Self.startTime(of: command))
        exec.signal(SIGKILL)
        let deadline = Date().addingTimeInterval(10)
        while Self.startTime(of: command) == started && Date() < deadline { usleep(20_000) }
        let survived = Self.startTime(of: command) == started
        // Before waiting for federate: Foundation's `Process` sees federate's end once every
        // holder of the socket it gave federate has closed it, and the command inherited it.
        if survived { kill(command, SIGKILL) }
        XCTAssertFalse(survived, "the command outlived the federate that served it")
        XCTAssertEqual(exec.waitForExit(), 128 + SIGKILL)
    }

    /// When `pid` started (clock ticks since boot, `/proc/<pid>/stat`'s 22nd field); `nil` once
    /// it has ended, a zombie included (an orphan's zombie waits for a reaper that a container
    /// may not have).
    private static func startTime(of pid: pid_t) -> String? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // After the command name: state (field 3), …, start time (field 22).
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 19, fields[0] != "Z" else { return nil }
        return String(fields[19])
    }

    /// Ctrl-C at a terminal signals the whole foreground process group, the command (which
    /// shares federate's group) included: federate must not forward that SIGINT a second
    /// time (Terraform, for one, reads two interrupts as "stop now, leave the state locked").
    /// The terminal here is a pseudo-terminal a Python driver opens; `kill` still forwards
    /// (testSignalsAreForwardedToTheCommand).
    func testOneCtrlCAtATerminalReachesTheCommandOnce() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        let counter = try harness.write(Self.interruptCounter, to: "counter.py")
        let result = try runAtATerminal(["exec", "--", "python3", counter], then: .ctrlC)
        let text = result["output"] as? String ?? ""
        XCTAssertEqual(result["status"] as? Int, 0, text)
        XCTAssertTrue(text.contains("interrupts 1"), "the command did not get exactly one SIGINT: \(text)")
    }

    /// A command that catches Ctrl-C and exits with a status of its own: `federate` exits with
    /// that status. Its own copy of the terminal's SIGINT may still be on its way when the
    /// command has ended; it must not end `federate` (130) once forwarding stops. Repeated,
    /// because how often the copy arrives late depends on the machine's load.
    func testACommandThatCatchesCtrlCDecidesTheStatus() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        var statuses: [Int] = []
        for _ in 0..<12 {
            let result = try runAtATerminal(["exec", "--", "sh", "-c", "trap 'exit 42' INT; echo ready; sleep 30 & wait"], then: .ctrlC)
            statuses.append(result["status"] as? Int ?? -1)
        }
        XCTAssertEqual(statuses, Array(repeating: 42, count: 12))
    }

    /// A command that left federate's process group (`setsid`) is not in the terminal's
    /// foreground group: the Ctrl-C reaches it only through federate, which must forward it.
    func testACtrlCReachesACommandThatLeftTheProcessGroup() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        let counter = try harness.write(Self.interruptCounter, to: "counter.py")
        let result = try runAtATerminal(["exec", "--", "setsid", "python3", counter], then: .ctrlC)
        let text = result["output"] as? String ?? ""
        XCTAssertEqual(result["status"] as? Int, 0, text)
        XCTAssertTrue(text.contains("interrupts 1"), "the command did not get exactly one SIGINT: \(text)")
    }

    /// Prints "ready", counts SIGINTs until a second after the first, prints the count.
    private static let interruptCounter = """
        import signal, time
        count = 0
        def on_interrupt(signo, frame):
            global count
            count += 1
        signal.signal(signal.SIGINT, on_interrupt)
        print("ready", flush=True)
        deadline = time.time() + 10
        while count == 0 and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(1)
        print("interrupts", count, flush=True)

        """

    /// When `federate` leads the session (`ssh -t host federate exec …`), a hang-up sends
    /// SIGHUP to it alone: it must forward that one, or the command runs on and `federate`
    /// waits for it for ever.
    func testAHangUpReachesTheCommandWhenFederateLeadsTheSession() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "default")
        let marker = harness.directory + "/hung-up"
        let command = try harness.write("""
            import signal, sys, time
            def on_hang_up(signo, frame):
                open(sys.argv[1], "w").write("hup")
                sys.exit(0)
            signal.signal(signal.SIGHUP, on_hang_up)
            print("ready", flush=True)
            time.sleep(20)

            """, to: "hang-up.py")
        let result = try runAtATerminal(["exec", "--", "python3", command, marker], then: .hangUp)
        XCTAssertLessThan(result["seconds"] as? Double ?? 99, 10, "federate did not end after the hang-up: \(result)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: marker), "the command never got SIGHUP: \(result)")
    }

    private enum TerminalAction: String { case ctrlC = "ctrl-c", hangUp = "hang-up" }

    /// Runs `federate arguments…` as the session leader of a new pseudo-terminal (a Python
    /// driver's `pty.fork`), and once it prints "ready", types Ctrl-C or hangs up (closes
    /// the terminal). Returns the driver's JSON: `status`, `output`, `seconds` to the end.
    private func runAtATerminal(_ arguments: [String], then action: TerminalAction) throws -> [String: Any] {
        let driver = try harness.write("""
            import json, os, pty, select, sys, time
            action = sys.argv[1]
            pid, terminal = pty.fork()
            if pid == 0:
                os.execv(sys.argv[2], sys.argv[2:])
            output, acted, start = b"", None, time.time()
            while time.time() < start + 30:
                if select.select([terminal], [], [], 0.1)[0]:
                    try:
                        chunk = os.read(terminal, 1024)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        break
                    output += chunk
                if acted is None and b"ready" in output:
                    acted = time.time()
                    if action == "ctrl-c":
                        os.write(terminal, b"\\x03")
                    else:
                        os.close(terminal)
                        break
            status = None
            while time.time() < start + 30:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.05)
            else:
                os.kill(pid, 9)
                _, status = os.waitpid(pid, 0)
            print(json.dumps({"status": os.waitstatus_to_exitcode(status), "output": output.decode(errors="replace"),
                              "seconds": time.time() - (acted or start)}))

            """, to: "pty-driver.py")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", driver, action.rawValue, harness.binary] + arguments
        process.environment = harness.environment
        process.currentDirectoryURL = URL(fileURLWithPath: harness.directory)
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return try Self.json(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    // MARK: - No valid credentials at start

    func testNoValidCredentialsExitsThreeWithoutRunningTheCommand() throws {
        let marker = harness.directory + "/ran"
        let command = ["--", "sh", "-c", "touch '\(marker)'"]
        // No keystore at all: nothing created either.
        var run = try harness.expect(3, ["exec"] + command)
        XCTAssertTrue(run.stderr.contains("log in"), run.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "exec created the keystore")

        // Never federated in an existing keystore.
        let cognito = try countingCognito(lifetime: 60)
        try login(cognito, session: "short")
        run = try harness.expect(3, ["exec", "--session", "never"] + command)
        XCTAssertTrue(run.stderr.contains("federate login --session never"), run.stderr)

        // Expired: 60-second credentials under the default 120-second margin.
        run = try harness.expect(3, ["exec", "--session", "short"] + command)
        XCTAssertTrue(run.stderr.contains("log in"), run.stderr)

        // Cleared.
        try login(try countingCognito(), session: "gone")
        try harness.expect(0, ["clear", "--session", "gone"])
        try harness.expect(3, ["exec", "--session", "gone"] + command)

        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the command ran")
        // A usage error: no command.
        try harness.expect(2, ["exec", "--session", "short"])
    }

    // MARK: - A default profile that would come first

    /// A `[default]` profile with credentials in `~/.aws/credentials` or `~/.aws/config`
    /// would be used by the command's SDK before the endpoint: `exec` refuses, names the
    /// file and the variable that points it away, and runs nothing; pointed away (or with a
    /// default profile that only sets the region) the command runs.
    func testADefaultProfileWithCredentialsInTheSharedFilesStopsExec() throws {
        try login(try countingCognito())
        let marker = harness.directory + "/ran"
        let command = ["--", "sh", "-c", "touch '\(marker)'"]
        let awsDirectory = harness.directory + "/.aws"
        try FileManager.default.createDirectory(atPath: awsDirectory, withIntermediateDirectories: true)
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYDEFAULTKEY"
        harness.neverPrinted.append(secret)
        _ = try harness.write("[default]\naws_access_key_id = AKIADEFAULTPROFILE\naws_secret_access_key = \(secret)\n", to: ".aws/credentials")

        var run = try harness.expect(2, ["exec", "--session", "alice"] + command)
        XCTAssertTrue(run.stderr.contains(awsDirectory + "/credentials (aws_access_key_id, aws_secret_access_key)"), run.stderr)
        XCTAssertTrue(run.stderr.contains("AWS_SHARED_CREDENTIALS_FILE=/dev/null"), run.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the command ran")

        // The config file's default profile: a credential process.
        _ = try harness.write("[profile default]\nregion = eu-west-1\ncredential_process = /usr/bin/false\n", to: ".aws/config")
        run = try harness.expect(2, ["exec", "--session", "alice"] + command, environment: ["AWS_SHARED_CREDENTIALS_FILE": "/dev/null"])
        XCTAssertTrue(run.stderr.contains(awsDirectory + "/config (credential_process)"), run.stderr)
        XCTAssertFalse(run.stderr.contains("/credentials"), run.stderr)
        XCTAssertTrue(run.stderr.contains("AWS_CONFIG_FILE=/dev/null with AWS_REGION and AWS_DEFAULT_REGION set"), run.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the command ran")

        // A default profile that only sets the region is no source of credentials.
        _ = try harness.write("[default]\nregion = eu-west-1\n", to: ".aws/config")
        try harness.expect(0, ["exec", "--session", "alice"] + command, environment: ["AWS_SHARED_CREDENTIALS_FILE": "/dev/null"])
        XCTAssertTrue(FileManager.default.fileExists(atPath: marker), "the command did not run")
    }

    /// JVM options that give a Java SDK credentials first (a system property comes before the
    /// environment `exec` sets) stop `exec` as a default profile with keys does.
    func testJavaOptionsWithCredentialPropertiesStopExec() throws {
        try login(try countingCognito())
        let marker = harness.directory + "/ran"
        let command = ["--", "sh", "-c", "touch '\(marker)'"]
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYJAVAKEY"
        harness.neverPrinted.append(secret)
        let run = try harness.expect(
            2, ["exec", "--session", "alice"] + command,
            environment: ["JAVA_TOOL_OPTIONS": "-Xmx64m -Daws.accessKeyId=AKIAJAVAOPTIONS -Daws.secretAccessKey=\(secret)"])
        XCTAssertTrue(run.stderr.contains("$JAVA_TOOL_OPTIONS (-Daws.accessKeyId, -Daws.secretAccessKey)"), run.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the command ran")

        // Options that give no credentials pass.
        try harness.expect(0, ["exec", "--session", "alice"] + command, environment: ["JAVA_TOOL_OPTIONS": "-Xmx64m -Daws.region=eu-west-1"])
        XCTAssertTrue(FileManager.default.fileExists(atPath: marker), "the command did not run")
    }

    // MARK: - serve

    /// A redirect into a file another user made first opens their file: `serve` refuses it
    /// and prints no token there.
    func testServeRefusesAStandardOutputAnotherUserOwns() throws {
        guard getuid() == 0 else { throw missingPrerequisite("needs root to make a file another user owns") }
        try login(try countingCognito(), session: "carol")
        let planted = harness.directory + "/carol.env"
        XCTAssertTrue(FileManager.default.createFile(atPath: planted, contents: nil))
        XCTAssertEqual(chown(planted, 65_534, 65_534), 0)
        XCTAssertEqual(chmod(planted, 0o666), 0)
        let run = try harness.run(["serve", "--session", "carol"], stdoutDevice: planted, timeout: 15)
        XCTAssertEqual(run.status, 2, "\(run)")
        XCTAssertTrue(run.stderr.contains("owned by uid 65534"), run.stderr)
        XCTAssertEqual(try String(contentsOfFile: planted, encoding: .utf8), "", "the token was written to another user's file")

        // A named pipe they own: they would read the token from its other end.
        let pipe = harness.directory + "/carol.fifo"
        XCTAssertEqual(mkfifo(pipe, 0o666), 0)
        XCTAssertEqual(chown(pipe, 65_534, 65_534), 0)
        let reader = open(pipe, O_RDWR | O_NONBLOCK)  // so that opening it to write does not wait
        XCTAssertGreaterThanOrEqual(reader, 0)
        defer { close(reader) }
        let piped = try harness.run(["serve", "--session", "carol"], stdoutDevice: pipe, timeout: 15)
        XCTAssertEqual(piped.status, 2, "\(piped)")
        XCTAssertTrue(piped.stderr.contains("a named pipe owned by uid 65534"), piped.stderr)
        var buffer = [UInt8](repeating: 0, count: 256)
        XCTAssertLessThanOrEqual(read(reader, &buffer, buffer.count), 0, "the token was written to another user's pipe")
    }

    /// A keystore `serve` cannot read (another key than the one it was made with) or a
    /// session it cannot read (a damaged row, which the key check passes) exits 6 at once,
    /// printing no token.
    func testServeOnAKeystoreItCannotReadExitsSix() throws {
        try login(try countingCognito(), session: "carol")
        let wrongKey = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        harness.neverPrinted.append(wrongKey)
        let run = try harness.run(["serve", "--session", "carol"], environment: ["IDENTITY_BROKER_KEY": wrongKey], timeout: 15)
        XCTAssertEqual(run.status, 6, "\(run)")
        harness.assertOneErrorLine(run)
        XCTAssertEqual(run.stdout, "", "a token was printed")

        try harness.tamper("carol")
        let damaged = try harness.run(["serve", "--session", "carol"], timeout: 15)
        XCTAssertEqual(damaged.status, 6, "\(damaged)")
        harness.assertOneErrorLine(damaged)
        XCTAssertTrue(damaged.stderr.contains("authentication"), damaged.stderr)
        XCTAssertEqual(damaged.stdout, "", "a token was printed")
    }

    func testServePrintsExportsServesAndStopsOnSIGTERM() async throws {
        let cognito = try countingCognito()
        try login(cognito, session: "carol")
        for signal in [SIGTERM, SIGINT] {
            let serve = try BackgroundFederate(harness, ["serve", "--session", "carol"])
            let (url, token) = try serve.servedEndpoint()
            XCTAssertTrue(url.hasPrefix("http://127.0.0.1:") && url.hasSuffix("/credentials/carol"), url)
            XCTAssertEqual(token.count, 64)

            let served = try await CurlTransport.shared.send(HTTPRequest(method: "GET", url: url, headers: [("Authorization", token)]))
            XCTAssertEqual(served.status, 200)
            XCTAssertTrue(String(decoding: served.body, as: UTF8.self).contains(FakeCognito.accessKeyId(1)))
            let refused = try await CurlTransport.shared.send(HTTPRequest(method: "GET", url: url))
            XCTAssertEqual(refused.status, 401)
            XCTAssertFalse(String(decoding: refused.body, as: UTF8.self).contains(FakeCognito.secretKey))

            serve.signal(signal)
            XCTAssertEqual(serve.waitForExit(), 0, "serve after signal \(signal): \(serve.stderr)")
            XCTAssertEqual(serve.stderr, "")
            XCTAssertNil(leakedRun(in: serve.stderr, of: [token]))
            do {
                _ = try await CurlTransport.shared.send(HTTPRequest(method: "GET", url: url, headers: [("Authorization", token)]))
                XCTFail("serve still answers after it exited")
            } catch {}
        }
    }

    /// The URL and token `serve` exported, from its two lines.

    /// A supervisor that stops `serve` as soon as it started gets exit 0, as it does later: a
    /// stop that arrives once `federate` runs its own code waits for `serve`'s handler, while
    /// `federate` hands over and `federate-server` loads. It used to end the process (143)
    /// until the service group installed its own, ~40–80 ms in; without `federate` blocking
    /// the signals for the hand-over, until ~20 ms in. The delays are multiples of the median
    /// time a whole `federate` run that fails at once takes (~11 ms here, debug build), so the
    /// stop never lands while the loader maps `federate` itself, before any code of ours runs.
    func testServeStoppedWhileStartingExitsZero() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "carol")
        var runs: [Duration] = []
        for _ in 0..<5 {
            let start = ContinuousClock.now
            var pid: pid_t = 0
            var actions: posix_spawn_file_actions_t = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
            let argv: [UnsafeMutablePointer<CChar>?] = [strdup(harness.binary), strdup("--no-such-option"), nil]
            defer { for argument in argv { free(argument) } }
            XCTAssertEqual(posix_spawn(&pid, harness.binary, &actions, nil, argv, environ), 0)
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
            runs.append(ContinuousClock.now - start)
        }
        let typical = runs.sorted()[runs.count / 2]
        for factor in [1.5, 2.0, 3.0, 4.0, 6.0] {
            let delay = typical * factor
            for signal in [SIGTERM, SIGINT] {
                let serve = try BackgroundFederate(harness, ["serve", "--session", "carol"])
                Thread.sleep(forTimeInterval: Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
                serve.signal(signal)
                XCTAssertEqual(serve.waitForExit(), 0, "serve stopped \(delay) after it started (signal \(signal)): \(serve.stderr)")
                XCTAssertEqual(serve.stderr, "", "signal \(signal) after \(delay)")
                // Either nothing, or both lines: never half an answer.
                XCTAssertTrue([0, 2].contains(serve.stdoutLines.count), serve.stdout)
            }
        }
    }

    /// A stop while the keystore still opens (a PostgreSQL server that takes the connection
    /// and never answers) ends `serve` at once, with 0 and nothing printed; it used to wait
    /// for the connect timeout and exit 6.
    func testServeStoppedWhileTheKeystoreOpensExitsAtOnce() throws {
        let key = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        for signal in [SIGTERM, SIGINT] {
            // A listener of its own per run: a connection the last run left in the backlog
            // would otherwise stand for this run's.
            let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            XCTAssertGreaterThanOrEqual(listener, 0)
            defer { close(listener) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                    bind(listener, pointer, length) == 0 && listen(listener, 16) == 0 && getsockname(listener, pointer, &length) == 0
                }
            }
            XCTAssertTrue(bound)
            let port = UInt16(bigEndian: address.sin_port)
            let serve = try BackgroundFederate(harness, ["serve", "--session", "carol"], environment: [
                // A connect timeout far past the bound below: only stopping at once meets it.
                "IDENTITY_BROKER_KEYSTORE": "postgres://nobody@127.0.0.1:\(port)/db?sslmode=disable&connect_timeout=60",
                "IDENTITY_BROKER_KEY": key,
            ])
            // The keystore is opening once its connection arrives (held open, never answered).
            var waiting = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&waiting, 1, 20_000) == 1 else {
                XCTFail("serve never connected to the database: \(serve.stderr)")
                serve.signal(SIGKILL)
                _ = serve.waitForExit()
                continue
            }
            let connection = accept(listener, nil, nil)
            XCTAssertGreaterThanOrEqual(connection, 0)
            defer { if connection >= 0 { close(connection) } }
            let sent = ContinuousClock.now
            serve.signal(signal)
            XCTAssertEqual(serve.waitForExit(), 0, "signal \(signal): \(serve.stderr)")
            XCTAssertLessThan(ContinuousClock.now - sent, .seconds(20), "serve waited for the keystore before it stopped")
            XCTAssertEqual(serve.stdout, "")
        }
    }

    /// A supervisor that sends SIGTERM twice still sees 0: only a second SIGINT (an impatient
    /// Ctrl-C) ends a shutdown under way.
    func testServeStoppedTwiceBySIGTERMExitsZero() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "carol")
        for _ in 0..<4 {
            let serve = try BackgroundFederate(harness, ["serve", "--session", "carol"])
            XCTAssertEqual(serve.waitForLines(2).count, 2)
            serve.signal(SIGTERM)
            usleep(1_000)
            serve.signal(SIGTERM)
            XCTAssertEqual(serve.waitForExit(), 0, serve.stderr)
        }
    }

    /// `serve > /tmp/x.env` under umask 022 writes the token to a file others may read: it
    /// serves, with a note that says so and what to do; a file only the user reads gets none.
    func testServeNotesAFileOthersMayRead() throws {
        let cognito = try countingCognito()
        try login(cognito, session: "carol")
        for (permissions, noted) in [(0o644, true), (0o640, true), (0o600, false)] {
            let serve = try BackgroundFederate(harness, ["serve", "--session", "carol"], outputPermissions: permissions)
            let (_, token) = try serve.servedEndpoint()
            serve.signal(SIGTERM)
            XCTAssertEqual(serve.waitForExit(), 0, serve.stderr)
            XCTAssertEqual(serve.stderr.contains("may read (mode 0\(String(permissions, radix: 8)))"), noted, "mode \(String(permissions, radix: 8)): \(serve.stderr)")
            XCTAssertNil(leakedRun(in: serve.stderr, of: [token]))
        }
    }

    func testServeWithoutCredentialsStillServesWithANote() async throws {
        let serve = try BackgroundFederate(harness, ["serve", "--session", "later"])
        let lines = serve.waitForLines(2)
        XCTAssertEqual(lines.count, 2)
        XCTAssertTrue(serve.stderr.contains("no valid credentials"), serve.stderr)
        // The keystore directory it needs to follow a later login is made as a first write makes it.
        var info = stat()
        XCTAssertEqual(stat(harness.keystore, &info), 0, "serve did not create the keystore directory")
        XCTAssertEqual(info.st_mode & 0o7777, 0o700)
        serve.signal(SIGTERM)
        XCTAssertEqual(serve.waitForExit(), 0, serve.stderr)
    }

    /// docs/cli.md, exit 1: `exec` and `serve` need `federate-server` next to `federate`; a
    /// `federate` installed alone says so in one line and runs nothing.
    func testAFederateWithoutItsServerBesideItExitsOne() throws {
        let alone = harness.directory + "/alone"
        try FileManager.default.createDirectory(atPath: alone, withIntermediateDirectories: false)
        let marker = harness.directory + "/ran"
        // The launcher copies federate into a directory of its own and runs that copy.
        let copied = ["sh", "-c", "cp \"$0\" '\(alone)/federate' && exec '\(alone)/federate' \"$@\""]
        for command in [["exec", "--", "touch", marker], ["serve"]] {
            let run = try harness.run(command, launcher: copied)
            XCTAssertEqual(run.status, 1, "\(run)")
            XCTAssertTrue(run.stderr.contains("federate-server") && run.stderr.contains("next to federate"), "\(run)")
            harness.assertOneErrorLine(run)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the command ran")
    }

    // MARK: - Helpers

    static func json(_ line: String) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], line)
    }
}
