import BrokerTestSupport
import Federation
import Foundation
import XCTest

/// Exit 2 (usage and bad local input), help, and the commands that need no service.
final class FederateUsageTests: XCTestCase {
    private var harness: FederateHarness!

    override func setUpWithError() throws {
        harness = try FederateHarness()
    }

    override func tearDown() {
        harness?.cleanUp()
    }

    /// `federate` links FoundationEssentials, not Foundation and ICU: loading those costs
    /// every `credential_process` call several milliseconds (docs/performance.md), and one
    /// plain `import Foundation` in a file of the CLI's modules is enough to bring them back.
    func testTheBinaryLinksNeitherFoundationNorICU() throws {
        let ldd = Process()
        ldd.executableURL = URL(fileURLWithPath: "/usr/bin/ldd")
        ldd.arguments = [harness.binary]
        let output = Pipe()
        ldd.standardOutput = output
        try ldd.run()
        let libraries = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        ldd.waitUntilExit()
        XCTAssertEqual(ldd.terminationStatus, 0, libraries)
        XCTAssertTrue(libraries.contains("libc.so"), "ldd listed nothing of the binary's: \(libraries)")
        for unwanted in ["libFoundation.so", "libFoundationInternationalization", "FoundationICU"] {
            XCTAssertFalse(libraries.contains(unwanted), "federate links \(unwanted): \(libraries)")
        }
    }

    func testHelpPrintsToStdoutAndExitsZero() throws {
        let help = try harness.run(["--help"])
        XCTAssertEqual(help.status, 0, "\(help)")
        XCTAssertTrue(help.stdout.contains("login"))
        XCTAssertTrue(help.stdout.contains("credentials"))
        XCTAssertEqual(help.stderr, "")
        let loginHelp = try harness.run(["login", "--help"])
        XCTAssertEqual(loginHelp.status, 0, "\(loginHelp)")
        XCTAssertTrue(loginHelp.stdout.contains("--token-stdin"))
        XCTAssertTrue(loginHelp.stdout.contains("--expiry-margin"))
    }

    /// A bug report can say which release it is about; the version is the one the
    /// `User-Agent` sends.
    func testVersionPrintsTheLibrarysVersion() throws {
        let version = try harness.run(["--version"])
        XCTAssertEqual(version.status, 0, "\(version)")
        XCTAssertEqual(version.stdout, "\(IdentityBrokerVersion.current)\n")
        XCTAssertEqual(version.stderr, "")
    }

    /// A mistyped subcommand is what the line names, not an option after it (which the top
    /// level does not know either); a token pasted in its place is not quoted.
    func testUnknownSubcommandExitsTwo() throws {
        let unknown = try harness.expect(2, ["frobnicate"])
        XCTAssertEqual(unknown.stderr, "federate: unknown subcommand 'frobnicate'; run 'federate --help' for usage\n")
        let mistyped = try harness.expect(2, ["credential", "--session", "x"])
        XCTAssertEqual(mistyped.stderr, "federate: unknown subcommand 'credential' (did you mean 'credentials'?); run 'federate --help' for usage\n")
        let help = try harness.expect(2, ["help", "logn"])
        XCTAssertEqual(help.stderr, "federate: unknown subcommand 'logn' (did you mean 'login'?); run 'federate --help' for usage\n")
        let token = TestJWT.valid(sub: "pasted")
        let pasted = try harness.expect(2, [token, "--session", "x"])
        XCTAssertTrue(pasted.stderr.contains("unknown subcommand: an argument of \(token.utf8.count) bytes (not shown"), pasted.stderr)
        let far = try harness.expect(2, ["help", "bogus"])
        XCTAssertEqual(far.stderr, "federate: unknown subcommand 'bogus'; run 'federate --help' for usage\n", "nothing near enough to suggest")
        try harness.expect(0, ["help", "login"])
    }

    func testNoSubcommandExitsTwo() throws {
        try harness.expect(2, [])
    }

    func testUnknownOptionExitsTwo() throws {
        try harness.expect(2, ["credentials", "--no-such-option"])
        try harness.expect(2, ["status", "--format", "json"])  // status has no --format
    }

    /// `rekey` and `migrate` work on every session of an access group and call no service:
    /// a session's options are refused (earlier releases accepted and ignored them, so
    /// `rekey --session alice` re-sealed every session), saying why, and nothing is opened.
    func testRekeyAndMigrateRefuseASessionsOptionsSayingWhy() throws {
        let rekeyTakes = "rekey works on every session of an access group and never calls the network: give it only --keystore, --access-group and --verbose"
        let migrateTakes = "migrate works on every session of an access group and never calls the network: give it only --from, --to, --keystore and --verbose"
        for (arguments, option, hint) in [
            (["rekey", "--session", "alice"], "--session", rekeyTakes),
            (["rekey", "--region", "eu-west-1"], "--region", rekeyTakes),
            (["migrate", "--from", "none", "--to", "team", "--endpoint=http://127.0.0.1:9"], "--endpoint", migrateTakes),
            (["migrate", "--from", "none", "--to", "team", "--expiry-margin", "60"], "--expiry-margin", migrateTakes),
            (["migrate", "--from", "none", "--to", "team", "--access-group", "ops"], "--access-group",
             "migrate names its two groups with --from and --to: give it only --from, --to, --keystore and --verbose"),
        ] {
            let run = try harness.expect(2, arguments)
            XCTAssertEqual(run.stderr, "federate: Unknown option '\(option)'; \(hint)\n")
            XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "a keystore was opened: \(arguments)")
        }
        let help = try harness.run(["rekey", "--help"])
        XCTAssertTrue(help.stdout.contains("--access-group"), help.stdout)
        XCTAssertFalse(help.stdout.contains("--session"), help.stdout)
        let migrateHelp = try harness.run(["migrate", "--help"])
        XCTAssertFalse(migrateHelp.stdout.contains("--access-group"), migrateHelp.stdout)
    }

    /// A misspelt option is named first, with the nearest real one, even where argument-parser
    /// reports something else first (a missing option, or a check of the options it read);
    /// the hint points at the subcommand's help; an "option" that may be a pasted token is
    /// never quoted.
    func testAMisspeltOptionIsNamedBeforeAnythingElse() throws {
        let other = try harness.expect(2, ["status", "--no-such-option"])
        XCTAssertTrue(other.stderr.contains("run 'federate status --help'"), other.stderr)
        // Named first even where argument-parser reports something else first: a missing
        // option, or a check of the options it read.
        for arguments in [["login", "--sesion", "alice"], ["login", "--pool-id", "us-east-1:x", "--provider", "google", "--sesion", "alice"]] {
            let run = try harness.expect(2, arguments)
            XCTAssertEqual(run.stderr, "federate: Unknown option '--sesion' (did you mean '--session'?); run 'federate login --help' for usage\n")
        }
        for pasted in ["--eyJhbGciOiJIUzI1NiJ9\(UUID().uuidString)", "--" + String(UUID().uuidString.filter(\.isHexDigit).prefix(32)).lowercased()] {
            let secret = try harness.expect(2, ["status", pasted])
            XCTAssertFalse(secret.stderr.contains(String(pasted.dropFirst(2).prefix(16))), secret.stderr)
            XCTAssertTrue(secret.stderr.contains("not shown: it may hold a secret"), secret.stderr)
        }
        let underscored = try harness.expect(2, ["login", "--pool_id", "us-east-1:x"])
        XCTAssertEqual(underscored.stderr, "federate: Unknown option '--pool_id' (did you mean '--pool-id'?); run 'federate login --help' for usage\n")
        let distant = try harness.expect(2, ["status", "--store", "/tmp/x"])
        XCTAssertTrue(distant.stderr.contains("Unknown option '--store' (did you mean '--keystore'?)"), distant.stderr)
        // A value that starts with -- is not an option: argument-parser's own word stands,
        // and the value (perhaps a token) is not quoted.
        let value = try harness.expect(2, ["login", "--pool-id", "us-east-1:x", "--provider", "google", "--token-file", "--deadbeefcafe"])
        XCTAssertTrue(value.stderr.contains("Missing value for '--token-file"), value.stderr)
        XCTAssertFalse(value.stderr.contains("deadbeef"), value.stderr)
        // exec without --: its own advice, and the wrapped command's options are not quoted.
        let wrapped = try harness.expect(2, ["exec", "--session", "alice", "aws", "sts", "get-caller-identity", "--output", "json"])
        XCTAssertFalse(wrapped.stderr.contains("--output"), wrapped.stderr)
        let farOff = try harness.expect(2, ["login", "--colour", "blue"])
        XCTAssertEqual(farOff.stderr, "federate: Unknown option '--colour'; run 'federate login --help' for usage\n")
        let misspelt = try harness.expect(2, ["credentials", "--sesion", "alice"])
        XCTAssertTrue(misspelt.stderr.contains("Unknown option '--sesion' (did you mean '--session'?); run 'federate credentials --help'"), misspelt.stderr)
    }

    /// A database URL given without `--keystore` is an unexpected argument, and the usage
    /// error quotes it: without its password, as is the key from the environment.
    func testAUsageErrorQuotingAnArgumentShowsNoSecretOfIt() throws {
        let password = "S3cretPassw0rdXYZ-\(UUID().uuidString.prefix(8))"
        let key = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        for arguments in [
            ["status", "postgres://alice:\(password)@127.0.0.1:1/db"],
            ["status", "--session", "a", "postgresql://alice:\(password)@[::1]:1/db", "--verbose"],
            ["clear", "\(key)"],
        ] {
            let run = try harness.expect(2, arguments, environment: ["IDENTITY_BROKER_KEY": key])
            XCTAssertTrue(run.stderr.contains("<redacted>"), "the argument was not quoted at all: \(run.stderr)")
            XCTAssertNil(leakedRun(in: run.stderr + run.stdout, of: [password, key]), run.stderr)
        }
    }

    /// A database URL written wrong (one slash, none, upper case) is a usage error that
    /// quotes no part of it, never a relative directory named after the password.
    func testAMistypedDatabaseURLIsAUsageErrorNotADirectory() throws {
        let password = "S3cretPassw0rdXYZ-\(UUID().uuidString.prefix(8))"
        for url in [
            "postgres:/alice:\(password)@127.0.0.1:1/db", "postgresql:alice:\(password)@db/x", "POSTGRES://alice:\(password)@db/x",
            "postgres//alice:\(password)@db/x",
        ] {
            for arguments in [["status", "--keystore", url], ["clear", "--keystore=\(url)"]] {
                let run = try harness.expect(2, arguments)
                XCTAssertTrue(run.stderr.contains("postgres://user:password@host:port/database"), run.stderr)
                XCTAssertNil(leakedRun(in: run.stderr + run.stdout, of: [password]), run.stderr)
            }
            let fromEnvironment = try harness.expect(2, ["status"], environment: ["IDENTITY_BROKER_KEYSTORE": url])
            XCTAssertNil(leakedRun(in: fromEnvironment.stderr, of: [password]), fromEnvironment.stderr)
        }
        // libpq's keyword form is not a directory either.
        for value in ["host=127.0.0.1 port=1 user=alice password=\(password) dbname=db", "dbname = db password = \(password)"] {
            let run = try harness.expect(2, ["status", "--keystore", value])
            XCTAssertTrue(run.stderr.contains("connection string"), run.stderr)
            XCTAssertNil(leakedRun(in: run.stderr + run.stdout, of: [password]), run.stderr)
            let fromEnvironment = try harness.expect(2, ["status"], environment: ["IDENTITY_BROKER_KEYSTORE": value])
            XCTAssertNil(leakedRun(in: fromEnvironment.stderr, of: [password]), fromEnvironment.stderr)
        }
        let made = try FileManager.default.contentsOfDirectory(atPath: harness.directory).filter {
            $0.lowercased().hasPrefix("postgres") || $0.contains("=")
        }
        XCTAssertEqual(made, [], "a directory was made for a URL")
        // A directory of that name is still reachable as a path.
        let local = try harness.run(["status", "--keystore", "./postgres:local"])
        XCTAssertEqual(local.status, 0, "\(local)")
        // A relative directory named postgres is refused too (for postgres//…'s sake), and
        // the line quotes what it starts with.
        for (value, start) in [("postgres/sessions", "postgres/"), ("PostgreSQL:x", "PostgreSQL:")] {
            let run = try harness.expect(2, ["status", "--keystore", value])
            XCTAssertTrue(run.stderr.contains("starting with '\(start)'") && run.stderr.contains("write ./\(start)…"), run.stderr)
        }
    }

    /// A `~` no shell expanded (quoted, after `=`, in a systemd unit's Environment=) is a
    /// usage error, not a directory named `~` in the working directory.
    func testAKeystoreStartingWithATildeIsAUsageError() throws {
        for arguments in [["status", "--keystore", "~/ks"], ["clear", "--keystore=~/ks"], ["status", "--keystore", "~"], ["status", "--keystore", "~alice/ks"]] {
            let run = try harness.expect(2, arguments)
            XCTAssertTrue(run.stderr.contains("--keystore starts with '~', which nothing expanded here"), "\(arguments): \(run)")
            harness.assertOneErrorLine(run)
        }
        let fromEnvironment = try harness.expect(
            2, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", "http://127.0.0.1:9/"], environment: ["IDENTITY_BROKER_KEYSTORE": "~/ks"])
        XCTAssertTrue(fromEnvironment.stderr.contains("$IDENTITY_BROKER_KEYSTORE starts with '~'"), "\(fromEnvironment)")
        // A home directory named so is the user's own business: only what they wrote is refused.
        try harness.expect(0, ["status"], environment: ["IDENTITY_BROKER_KEYSTORE": nil, "XDG_DATA_HOME": nil, "HOME": "~home"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.directory + "/~"), "a directory named ~ was made")
        // A directory of that name is still reachable as a path.
        try harness.expect(0, ["status", "--keystore", "./~ks"])
    }

    /// A token pasted where a path or an option belongs (`--token-file "$TOKEN"`, a stray
    /// argument) is never quoted back whole, into a terminal or a CI log.
    func testATokenGivenInPlaceOfAPathOrOptionIsNotQuotedBack() throws {
        let jwt = TestJWT.valid(sub: "pasted")
        let saml = String(repeating: "PHNhbWxwOlJl/c3Bvbn+Nl", count: 15) + "=="  // base64, longer than a file name
        let facebook = "EAA" + String(repeating: "ZCBqZBZAZDZD7xY", count: 12)
        let twitter = "1234567890-AbCdEfGhIjKlMnOp;QrStUvWxYz0123456789abcd"
        let custom = "opaque-custom-token-4f9a8b7c6d5e"  // nothing marks it as a token
        let wrapped = "wrapped-first-line-of-a-token-0a1b\nits-second-line-2c3d"  // as `base64` wraps
        let base64 = "c2VjcmV0/dG9rZW4+Zm9y/Y3VzdG9tMDEy"  // standard base64: '/' and '+' too
        let secrets = [jwt, saml, facebook, twitter, custom, base64, wrapped]
        let base = ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--endpoint", "http://127.0.0.1:9/"]
        for arguments in [
            base + ["--token-file", jwt], base + ["--token-file=\(jwt)"], base + ["--token-file", saml],
            base + ["--token-file", facebook], base + ["--token-file", twitter], base + ["--token-file", custom],
            base + ["--token-file", base64],
            ["status", jwt], ["clear", "--session", "a", saml], ["status", facebook], ["status", twitter],
            ["status", "--", jwt], base + ["--access-group", "--token-file=\(facebook)"],
            ["status", custom], ["clear", "--session", "a", custom, "extra"], ["status", "--", custom], ["status", wrapped],
        ] {
            let run = try harness.expect(2, arguments)
            XCTAssertNil(leakedRun(in: run.stderr + run.stdout, of: secrets), run.stderr)
        }
        // A short name, or one with a '/', is still named; so is a short stray argument.
        let named = try harness.expect(2, base + ["--token-file", "./" + custom])
        XCTAssertTrue(named.stderr.contains("./" + custom), named.stderr)
        let stray = try harness.expect(2, ["status", "stauts"])
        XCTAssertTrue(stray.stderr.contains("'stauts'"), stray.stderr)
        let measured = try harness.expect(2, ["status", custom])
        XCTAssertTrue(measured.stderr.contains("an argument of \(custom.utf8.count) bytes"), measured.stderr)
    }

    func testBadOptionValuesExitTwo() throws {
        let format = try harness.expect(2, ["credentials", "--format", "yaml"])
        // argument-parser's sentence, then ours after one semicolon: no ".;" between them.
        XCTAssertEqual(
            format.stderr,
            "federate: The value 'yaml' is invalid for '--format <process|json|env>'. Please provide one of 'process', 'json' or 'env'; "
                + "run 'federate credentials --help' for usage\n")
        try harness.expect(2, ["credentials", "--expiry-margin", "soon"])
        try harness.expect(2, ["credentials", "--expiry-margin=-5"])
        // argument-parser reads "-5" as an option and says the value is missing.
        let negative = try harness.expect(2, ["credentials", "--expiry-margin", "-5"])
        XCTAssertTrue(negative.stderr.contains("--expiry-margin must be 0 or more, not -5"), negative.stderr)
        // Only for the options that take a number: a session name is none.
        let session = try harness.expect(2, ["credentials", "--session", "-5"])
        XCTAssertFalse(session.stderr.contains("0 or more"), session.stderr)
        try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "myspace", "--token-stdin"], stdin: "x")
        try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "oidc:", "--token-stdin"], stdin: "x")
        // The likely slips get a hint.
        let capital = try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "Google", "--token-stdin"], stdin: "x")
        XCTAssertTrue(capital.stderr.contains("(did you mean 'google'?)"), capital.stderr)
        let bare = try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "oidc", "--token-stdin"], stdin: "x")
        XCTAssertTrue(bare.stderr.contains("(oidc takes the issuer after a colon: oidc:…)"), bare.stderr)
        try harness.expect(2, ["migrate", "--from", "none"])
        // An access group name the keystore cannot hold is bad input too, whatever the command
        // (and whether or not the source of a migration has items).
        let longGroup = String(repeating: "g", count: 151)
        try harness.expect(2, ["status", "--access-group", longGroup])
        try harness.expect(2, ["credentials", "--access-group", longGroup])
        try harness.expect(2, ["migrate", "--from", "none", "--to", longGroup])
        try harness.expect(2, ["migrate", "--from", longGroup, "--to", "none"])
    }

    func testLoginNeedsExactlyOneTokenSource() throws {
        let path = try harness.write(TestJWT.valid(), to: "token")
        try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "google"])
        try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-file", path, "--token-stdin"])
    }

    func testUnreadableTokenFileExitsTwoWithoutNetwork() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let base = ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--endpoint", cognito.endpoint]
        let missing = try harness.expect(2, base + ["--token-file", harness.directory + "/no-such-token"])
        XCTAssertTrue(missing.stderr.contains("no-such-token"), "the error names the file: \(missing)")
        try harness.expect(2, base + ["--token-file", harness.directory])  // a directory
        let empty = try harness.write("\n", to: "empty-token")
        try harness.expect(2, base + ["--token-file", empty])
        try harness.expect(2, base + ["--token-stdin"], stdin: "")
        // Not UTF-8, or longer than Cognito takes (and a line break).
        let binary = harness.directory + "/binary-token"
        try Data([0x65, 0x79, 0xFF, 0xFE, 0x4A]).write(to: URL(fileURLWithPath: binary))
        let notText = try harness.expect(2, base + ["--token-file", binary])
        XCTAssertTrue(notText.stderr.contains("UTF-8"), notText.stderr)
        let large = harness.directory + "/large-token"
        try Data(repeating: UInt8(ascii: "a"), count: FederationClient.maximumTokenBytes + 3).write(to: URL(fileURLWithPath: large))
        let tooLarge = try harness.expect(2, base + ["--token-file", large])
        XCTAssertTrue(tooLarge.stderr.contains("larger than"), tooLarge.stderr)
        XCTAssertEqual(cognito.calls.count, 0)
    }

    /// `--token-stdin` on a terminal would wait, with no prompt, for input that ends only at
    /// Ctrl-D, and echo the token as it is pasted: exit 2 at once, saying how to pass it.
    func testTokenStdinOnATerminalExitsTwoAtOnce() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let result = try harness.run(
            ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--endpoint", cognito.endpoint, "--token-stdin"],
            timeout: 15,
            launcher: ["python3", "-c", """
                import os, pty, sys
                leader, follower = pty.openpty()
                os.set_inheritable(leader, True)  # kept open across exec: no hang-up
                os.dup2(follower, 0)
                os.execv(sys.argv[1], sys.argv[1:])
                """])
        XCTAssertEqual(result.status, 2, "\(result)")
        harness.assertOneErrorLine(result)
        XCTAssertTrue(result.stderr.contains("terminal"), "\(result)")
        XCTAssertEqual(cognito.calls.count, 0)
    }

    func testMalformedJWTForOIDCExitsTwoWithoutNetwork() throws {
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        let token = "this-is-not-a-jwt-SECRETISH"
        harness.neverPrinted = [token]
        let path = try harness.write(token + "\n", to: "token")
        try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "oidc:login.example.com", "--token-file", path, "--endpoint", cognito.endpoint])
        // Well-formed segments that do not decode to JSON.
        try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "oidc:login.example.com", "--token-stdin", "--endpoint", cognito.endpoint], stdin: "aGVsbG8.d29ybGQ.c2ln\n")
        // A developer token without --identity-id is a JWT too.
        try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "developer", "--token-stdin", "--endpoint", cognito.endpoint], stdin: token)
        // A long-expired JWT.
        let expired = TestJWT.make(sub: "u", exp: Date().addingTimeInterval(-86_400))
        harness.neverPrinted.append(expired)
        try harness.expect(2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-stdin", "--endpoint", cognito.endpoint], stdin: expired)
        XCTAssertEqual(cognito.calls.count, 0, "a token failing the local check must not reach the service")
    }

    func testInvalidPoolIdOrEndpointExitsTwo() throws {
        let token = TestJWT.valid()
        harness.neverPrinted = [token]
        try harness.expect(2, ["login", "--pool-id", "not-a-pool", "--provider", "google", "--token-stdin"], stdin: token)
        try harness.expect(2, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", "ftp://127.0.0.1/"])
        try harness.expect(2, ["guest", "--pool-id", FakeCognito.poolId, "--region", "Mars"])
        // An identity ID of another shape never reaches the service (which would refuse it, or,
        // at an endpoint that is not AWS, echo it back); a token pasted there is not quoted.
        for identityId in ["us-east-1", "dGhpcyBpcyBub3QgYW4gaWQ+Lz0=", "us-east-1:a:b", String(repeating: "a", count: 50) + ":abcdef", token] {
            let refused = try harness.expect(
                2, ["login", "--pool-id", FakeCognito.poolId, "--provider", "developer", "--identity-id", identityId, "--token-stdin"], stdin: token)
            XCTAssertTrue(refused.stderr.contains("--identity-id must be a Cognito identity ID"), "\(refused)")
        }
        // Checked before the keystore is opened: a usage error creates no keystore, and wins
        // over a keystore that cannot be opened (a file where the directory belongs).
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "a usage error created the keystore")
        let file = try harness.write("not a directory", to: "file-keystore")
        try harness.expect(2, ["guest", "--pool-id", "not-a-pool", "--keystore", file])
        try harness.expect(6, ["guest", "--pool-id", FakeCognito.poolId, "--keystore", file])
    }

    func testCredentialsWithoutSessionExitsThree() throws {
        // No keystore at all: nothing is created.
        let none = try harness.expect(3, ["credentials", "--session", "alice"])
        XCTAssertTrue(none.stderr.contains("alice"), "\(none)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "credentials must not create the keystore")
        // An existing keystore without that session.
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "bob"])
        try harness.expect(3, ["credentials", "--session", "alice"])
    }

    func testStatusOfUnknownSessionIsNotFederated() throws {
        let result = try harness.expect(0, ["status", "--session", "nobody"])
        let object = try Output.jsonObject(result.stdout)
        XCTAssertEqual(object["session"] as? String, "nobody")
        XCTAssertEqual(object["state"] as? String, "notFederated")
        XCTAssertTrue(object["identityId"] is NSNull)
        XCTAssertTrue(object["provider"] is NSNull)
        XCTAssertTrue(object["expiration"] is NSNull)
        // A mistyped --keystore reads so too: stderr says that nothing is there.
        XCTAssertEqual(result.stderr, "federate: keystore \(harness.keystore) does not exist: nothing was ever saved there (check --keystore)\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "status must not create the keystore")

        // A directory made beforehand (or a keystore others use): only this user's part is missing.
        try FileManager.default.createDirectory(atPath: harness.keystore, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let empty = try harness.expect(0, ["status", "--session", "nobody"])
        XCTAssertEqual(try Output.jsonObject(empty.stdout)["state"] as? String, "notFederated")
        XCTAssertEqual(empty.stderr, "federate: nothing of yours is saved in keystore \(harness.keystore) yet (check --keystore)\n")

        // A keystore that exists, without that session: the JSON alone.
        let cognito = try FakeCognito.served()
        defer { cognito.stopServing() }
        try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "bob"])
        let known = try harness.expect(0, ["status", "--session", "nobody"])
        XCTAssertEqual(try Output.jsonObject(known.stdout)["state"] as? String, "notFederated")
        XCTAssertEqual(known.stderr, "")
        let otherGroup = try harness.expect(0, ["status", "--session", "bob", "--access-group", "tesm"])
        XCTAssertEqual(try Output.jsonObject(otherGroup.stdout)["state"] as? String, "notFederated")
        XCTAssertEqual(otherGroup.stderr, "federate: access group 'tesm' of keystore \(harness.keystore) does not exist (check --access-group and --keystore)\n")
    }

    func testClearOfUnknownSessionSucceeds() throws {
        let result = try harness.expect(0, ["clear", "--session", "nobody"])
        XCTAssertEqual(result.stdout, "")
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "clear must not create the keystore")
    }
}
