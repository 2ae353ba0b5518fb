import BrokerTestSupport
import Foundation
import SecureStorage
import XCTest

/// `federate` with `--keystore postgres://…` (issue 11): every command on a real PostgreSQL,
/// a password with URL-special characters in the URL, two "hosts" (harnesses with their own
/// HOME) sharing the database.
final class FederatePostgresTests: FederatePostgresTestCase {
    /// login, credentials, status, migrate, clear, all through the URL; another host sees
    /// the login; nothing shows the password or the key; the dump holds no secret.
    func testEveryCommandThroughAPostgresURL() throws {
        let cognito = try FakeCognito.served()
        let token = TestJWT.valid(sub: "alice-postgres")
        harness.neverPrinted.append(token)

        let login = try harness.expect(0, loginArguments(cognito, session: "alice"), stdin: token)
        let issued = try Output.assertProcessShape(login.stdout)
        XCTAssertEqual(issued["AccessKeyId"] as? String, FakeCognito.accessKeyId)

        // Another process on another host (its own HOME, no keystore directory), postgresql:// scheme.
        let other = try makeHarness(url: postgresURL(database: database, scheme: "postgresql"))
        defer { other.cleanUp() }
        other.neverPrinted.append(token)
        let seen = try other.expect(0, ["credentials", "--session", "alice", "--format", "json"])
        let object = try Output.assertProcessShape(seen.stdout, extraKeys: ["IdentityId", "Provider", "Session"])
        XCTAssertEqual(object["SecretAccessKey"] as? String, FakeCognito.secretKey)
        XCTAssertEqual(object["IdentityId"] as? String, FakeCognito.defaultIdentityId)
        XCTAssertFalse(FileManager.default.fileExists(atPath: other.keystore), "a postgres keystore creates no directory")

        let status = try Output.jsonObject(try other.expect(0, ["status", "--session", "alice"]).stdout)
        XCTAssertEqual(status["state"] as? String, "federated")
        XCTAssertEqual(try Output.jsonObject(try harness.expect(0, ["status", "--session", "nobody"]).stdout)["state"] as? String, "notFederated")
        let missing = try harness.expect(3, ["credentials", "--session", "nobody"])
        XCTAssertTrue(missing.stderr.contains("postgres://\(server.passwordRole)@127.0.0.1:\(server.port)/\(database!)"), missing.stderr)

        // migrate to a shared group: the private group no longer has it, the team sees it.
        let migrated = try harness.expect(0, ["migrate", "--from", "none", "--to", "team"])
        XCTAssertTrue(migrated.stderr.contains("moved 1 item"), migrated.stderr)
        try harness.expect(3, ["credentials", "--session", "alice"])
        try other.expect(0, ["credentials", "--session", "alice", "--access-group", "team"])
        try harness.expect(0, ["migrate", "--from", "team", "--to", "none"])
        try other.expect(0, ["credentials", "--session", "alice"])

        try harness.expect(0, ["clear", "--session", "alice"])
        XCTAssertEqual(try Output.jsonObject(try other.expect(0, ["status", "--session", "alice"]).stdout)["state"] as? String, "notFederated")
        try other.expect(3, ["credentials", "--session", "alice"])

        // The guest flow too, then the dump.
        let guest = try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "visitor"])
        try Output.assertProcessShape(guest.stdout)
        try harness.expect(0, ["credentials", "--session", "visitor"])
        try assertDumpHoldsNoSecret([FakeCognito.secretKey, FakeCognito.sessionToken, token, key, server.password])
    }

    /// `rekey` through the URL (`federate-server`): every session re-sealed with the current
    /// key, the old one given in `$IDENTITY_BROKER_OTHER_KEY`; neither key printed.
    func testRekeyThroughAPostgresURL() throws {
        let cognito = try FakeCognito.served()
        for session in ["alice", "bob"] {
            try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", session])
        }
        let newKey = Self.randomKey()
        harness.neverPrinted.append(newKey)
        let refused = try harness.expect(6, ["rekey"], environment: ["IDENTITY_BROKER_KEY": newKey])
        XCTAssertTrue(refused.stderr.contains("IDENTITY_BROKER_OTHER_KEY"), refused.stderr)
        let rotated = try harness.expect(0, ["rekey"], environment: ["IDENTITY_BROKER_KEY": newKey, "IDENTITY_BROKER_OTHER_KEY": key])
        XCTAssertTrue(rotated.stderr.contains("re-sealed 2 sessions with the current key"), rotated.stderr)
        try harness.expect(0, ["credentials", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": newKey])
        try harness.expect(6, ["credentials", "--session", "bob"])
    }

    /// `exec` and `serve` read the session from the database (and close it before exiting).
    func testExecRunsACommandWithCredentialsFromTheDatabase() throws {
        let cognito = try FakeCognito.served()
        let token = TestJWT.valid(sub: "exec-user")
        harness.neverPrinted.append(token)
        try harness.expect(0, loginArguments(cognito, session: "runner"), stdin: token)
        let run = try harness.run(["exec", "--session", "runner", "--", "/bin/sh", "-c", "test -n \"$AWS_CONTAINER_CREDENTIALS_FULL_URI\" && exit 7"])
        XCTAssertEqual(run.status, 7, "\(run)")
        // The command gets the session, not the keystore: no database URL (it holds the
        // password), no key, and none of the pool's logged-in connections (with them it could
        // speak SQL as the broker).
        let script = pythonOpenDescriptors + """
            import json, os
            print(json.dumps({
                "keystore": os.environ.get("IDENTITY_BROKER_KEYSTORE"), "key": os.environ.get("IDENTITY_BROKER_KEY"),
                "inherited_fds": open_descriptors(),
            }))
            """
        let seen = try harness.run(["exec", "--session", "runner", "--", "python3", "-c", script], launcher: onlyDescriptor7Launcher)
        XCTAssertEqual(seen.status, 0, "\(seen)")
        let object = try JSONSerialization.jsonObject(with: Data(seen.stdout.utf8)) as? [String: Any] ?? [:]
        XCTAssertTrue(object["keystore"] is NSNull, "the database URL reached the command: \(seen.stdout)")
        XCTAssertTrue(object["key"] is NSNull, "the keystore key reached the command")
        // Started with 7 open on /dev/null and nothing else (the launcher): 7 passes on, as a
        // `<(…)` pipe or make's jobserver must, and nothing federate opened reaches the command.
        XCTAssertEqual(object["inherited_fds"] as? [String: String], ["7": "/dev/null"], "descriptors leaked into the command, or an inherited one did not pass on")
        try harness.expect(3, ["exec", "--session", "nobody", "--", "/bin/true"])
    }

    /// A database URL given with `--keystore` holds the password, and every local user can
    /// read a process's command line: `exec` (and `serve`) hide it there while they run. The
    /// command's own arguments, after `--`, stay as they were, URLs with passwords included.
    func testThePasswordOfAKeystoreURLLeavesTheCommandLine() throws {
        let cognito = try FakeCognito.served()
        let token = TestJWT.valid(sub: "argv-user")
        harness.neverPrinted.append(token)
        try harness.expect(0, loginArguments(cognito, session: "argv"), stdin: token)
        harness.neverPrinted.removeAll { $0 == server.password || $0 == encodedPassword }  // the command prints its own argument
        // The command's own `--keystore URL`, after `--`, is its own: left alone.
        let ownURL = "postgres://someone:its-own-secret@db.example/x"
        let hidden = "postgres://\(server.passwordRole):\(String(repeating: "*", count: encodedPassword.utf8.count))@127.0.0.1:\(server.port)/\(database!)?sslmode=disable"
        for (given, shown) in [(["--keystore", url!], hidden), (["--keystore=\(url!)"], "--keystore=" + hidden)] {
            let run = try harness.run(
                ["exec"] + given + ["--session", "argv", "--", "sh", "-c", "tr '\\0' '\\n' < /proc/$PPID/cmdline; printf '%s\\n' \"$2\"", "sh", "--keystore", ownURL],
                environment: ["IDENTITY_BROKER_KEYSTORE": nil])
            XCTAssertEqual(run.status, 0, "\(run)")
            let lines = run.stdout.split(separator: "\n").map(String.init)
            XCTAssertFalse(run.stdout.contains(encodedPassword), "the password is on federate's command line: \(lines)")
            XCTAssertTrue(lines.contains(shown), "\(given): \(lines)")
            XCTAssertEqual(lines.last, ownURL, "the command's own argument was changed")
            XCTAssertEqual(lines.filter { $0 == ownURL }.count, 2, "the command's arguments on federate's command line were changed: \(lines)")
        }
    }

    /// Wrong key: exit 6; no key at all: exit 6 saying which variables; a malformed URL: exit 2;
    /// none of them shows the password.
    func testKeysAndURLMistakes() throws {
        let cognito = try FakeCognito.served()
        let token = TestJWT.valid(sub: "key-user")
        harness.neverPrinted.append(token)
        try harness.expect(0, loginArguments(cognito, session: "bob"), stdin: token)

        let wrongKey = Self.randomKey()
        harness.neverPrinted.append(wrongKey)
        let wrong = try harness.expect(6, ["credentials", "--session", "bob"], environment: ["IDENTITY_BROKER_KEY": wrongKey])
        XCTAssertTrue(wrong.stderr.contains("key"), wrong.stderr)

        let none = try harness.expect(6, ["credentials", "--session", "bob"], environment: ["IDENTITY_BROKER_KEY": nil])
        XCTAssertTrue(none.stderr.contains("IDENTITY_BROKER_PASSPHRASE"), none.stderr)

        let both = try harness.expect(2, ["credentials", "--session", "bob"], environment: ["IDENTITY_BROKER_PASSPHRASE": "a passphrase long enough"])
        XCTAssertTrue(both.stderr.contains("only one"), both.stderr)

        let badURL = "postgres://\(server.passwordRole):\(encodedPassword)@127.0.0.1:\(server.port)/\(database!)?sslmode=sometimes"
        let bad = try harness.expect(2, ["status", "--keystore", badURL])
        XCTAssertTrue(bad.stderr.contains("sslmode"), bad.stderr)

        // A certificate authority file that cannot be read is a local mistake (exit 2), not a
        // database that cannot be reached.
        let missingRoots = try harness.expect(2, ["status", "--keystore", postgresURL(database: database) + "&sslrootcert=/nonexistent/ca.pem"])
        XCTAssertTrue(missingRoots.stderr.contains("sslrootcert /nonexistent/ca.pem cannot be read"), missingRoots.stderr)

        // TLS asked for, on a server without TLS: exit 6, one line.
        let tls = try harness.expect(6, ["status", "--keystore", postgresURL(database: database).replacingOccurrences(of: "sslmode=disable", with: "sslmode=require")])
        XCTAssertTrue(tls.stderr.contains("127.0.0.1:\(server.port)"), tls.stderr)
        XCTAssertTrue(tls.stderr.contains("does not support TLS, which sslmode=require requires"), tls.stderr)

        // A wrong password: exit 6 naming the server, not the password.
        let wrongPassword = try harness.expect(6, ["status", "--keystore", "postgres://\(server.passwordRole):not-the-password@127.0.0.1:\(server.port)/\(database!)"])
        XCTAssertTrue(wrongPassword.stderr.contains("127.0.0.1:\(server.port)"), wrongPassword.stderr)
    }

    /// A command that makes one call logs in twice: once for the opening (schema, key check)
    /// on a connection of its own, once for the call; `credentials` and `status`, which read
    /// one session, and `migrate` once, everything on that one connection. Each used to log
    /// in three times (a probe, then the pool's two kept connections, one of which the change
    /// feed's listener took) and `migrate` twice, costing a one-shot command
    /// (`credential_process` runs one before AWS calls) a server backend and a password
    /// exchange per extra login. `--verbose` keeps the full open (its debug lines).
    func testACommandThatMakesOneCallLogsInOnceToOpenAndOnceForTheCall() throws {
        let cognito = try FakeCognito.served()
        let token = TestJWT.valid(sub: "logins-user")
        harness.neverPrinted.append(token)
        // Every connection goes through a proxy that counts them (a login each).
        let proxy = try keystoreThroughProxy()
        defer { proxy.stop() }
        func logins(_ status: Int32, _ arguments: [String], stdin: String? = nil) throws -> Int {
            let before = proxy.connectionsCarried
            try harness.expect(status, arguments, stdin: stdin)
            return proxy.connectionsCarried - before
        }
        try harness.expect(0, ["status", "--session", "warm-up"])  // the schema exists from here on
        XCTAssertEqual(try logins(0, loginArguments(cognito, session: "alice"), stdin: token), 2, "login")
        XCTAssertEqual(try logins(0, ["credentials", "--session", "alice"]), 1, "credentials")
        XCTAssertEqual(try logins(0, ["credentials", "--session", "alice", "--format", "json"]), 1, "credentials --format json")
        XCTAssertEqual(try logins(0, ["status", "--session", "alice"]), 1, "status")
        XCTAssertEqual(try logins(0, ["status", "--session", "alice", "--verbose"]), 2, "status --verbose")
        XCTAssertEqual(try logins(0, ["clear", "--session", "alice"]), 2, "clear")
        XCTAssertEqual(try logins(3, ["credentials", "--session", "alice"]), 1, "credentials of a cleared session")
        XCTAssertEqual(try logins(0, ["migrate", "--from", "none", "--to", "team"]), 1, "migrate")
    }

    /// docs/cli.md: a second SIGINT ends a graceful shutdown that lasts (the terminal's second
    /// Ctrl-C) with 130. The shutdown is held by a request whose read of the session waits on
    /// a path to the database that stopped carrying packets (the read's operation timeout is
    /// 10 s, and so is the longest graceful shutdown).
    func testServeEndsAShutdownThatLastsOnASecondSIGINT() throws {
        let cognito = try FakeCognito.served()
        let token = TestJWT.valid(sub: "sigint-user")
        harness.neverPrinted.append(token)
        let proxy = try keystoreThroughProxy()
        defer { proxy.stop() }
        try harness.expect(0, loginArguments(cognito, session: "carol"), stdin: token)
        let serve = try BackgroundFederate(harness, ["serve", "--session", "carol"])
        let (endpoint, bearer) = try serve.servedEndpoint()
        let parts = try XCTUnwrap(URLComponents(string: endpoint))
        proxy.freezeExisting()
        proxy.delayNewConnections(by: .seconds(60))
        let request = "GET \(parts.path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(bearer)\r\n\r\n"
        let held = try XCTUnwrap(HalfSentRequest(port: UInt16(try XCTUnwrap(parts.port)), sending: request), "could not connect to \(endpoint)")
        guard case .stillOpen = held.waitForClose(within: .milliseconds(500)) else {
            return XCTFail("the request was answered without reading the database")
        }

        serve.signal(SIGINT)
        Thread.sleep(forTimeInterval: 1)
        XCTAssertTrue(serve.isRunning, "the shutdown did not wait for the request in flight, so nothing here tests a second SIGINT: \(serve.stderr)")
        serve.signal(SIGINT)
        XCTAssertEqual(serve.waitForExit(timeout: 5), 130, "a second SIGINT did not end the shutdown: \(serve.stderr)")
        XCTAssertNil(leakedRun(in: serve.stderr, of: [bearer]))
    }

    /// `credentials` and `status` read a session on one connection: a damaged row fails that
    /// session alone, with the message and exit code of the full open (`--verbose` takes
    /// that path), a wrong key fails at the opening, and a bad session name is a usage error.
    func testOneLoginReadsFailAsTheFullOpenDoes() throws {
        let cognito = try FakeCognito.served()
        for name in ["alice", "bob"] {
            let token = TestJWT.valid(sub: "damage-\(name)")
            harness.neverPrinted.append(token)
            try harness.expect(0, loginArguments(cognito, session: name), stdin: token)
        }
        _ = try sqlValue("UPDATE identity_broker_items SET value = '\\x00'::bytea WHERE service <> '' AND key = 'session.alice' RETURNING 1")
        let damaged = try harness.expect(6, ["credentials", "--session", "alice"])
        let fullOpen = try harness.run(["credentials", "--session", "alice", "--verbose"])
        XCTAssertEqual(fullOpen.status, 6, "\(fullOpen)")
        XCTAssertTrue(damaged.stderr.contains("corruptFormat") || damaged.stderr.contains("authenticationFailed"), damaged.stderr)
        XCTAssertTrue(damaged.stderr.contains("clear"), "the error says how to recover: \(damaged.stderr)")
        XCTAssertEqual(
            fullOpen.stderr.split(separator: "\n").last.map(String.init), damaged.stderr.trimmingCharacters(in: .whitespacesAndNewlines),
            "the one-login read's message is the full open's")
        try harness.expect(6, ["status", "--session", "alice"])
        try harness.expect(0, ["credentials", "--session", "bob"])
        XCTAssertEqual(try Output.jsonObject(try harness.expect(0, ["status", "--session", "bob"]).stdout)["state"] as? String, "federated")

        let wrongKey = try makeHarness(key: Self.randomKey())
        defer { wrongKey.cleanUp() }
        let refused = try wrongKey.expect(6, ["credentials", "--session", "bob"])
        XCTAssertTrue(refused.stderr.contains("invalidKey"), refused.stderr)
        try harness.expect(2, ["status", "--session", "bad/name"])
    }

    /// A URL that leads to a standby (DNS a failover left on the demoted primary): exit 6
    /// with one line that names the standby and says to point `--keystore` at the primary,
    /// rather than the "cannot be reached" advice of a server that is down.
    func testAStandbyExitsSixSayingToUseThePrimary() throws {
        let standby = try server.startStandby()
        defer { standby.stop() }
        let url = postgresURL(database: database).replacingOccurrences(of: ":\(server.port)/", with: ":\(standby.port)/")
        let run = try harness.expect(6, ["status", "--keystore", url])
        XCTAssertTrue(run.stderr.contains("standby"), run.stderr)
        XCTAssertTrue(run.stderr.contains("point --keystore at the primary"), run.stderr)
        XCTAssertFalse(run.stderr.contains("cannot be reached"), run.stderr)
        XCTAssertEqual(run.stderr.split(separator: "\n").count, 1, run.stderr)
    }

    /// A URL without a password takes it from libpq's password file (`~/.pgpass`, or
    /// `$PGPASSFILE`), so it need not be on the command line or in an AWS config file; a
    /// file others may read is ignored with a warning (the login then fails), and nothing
    /// shows the password.
    func testAURLWithoutAPasswordTakesItFromThePasswordFile() throws {
        let cognito = try FakeCognito.served()
        let token = TestJWT.valid(sub: "pgpass-user")
        harness.neverPrinted.append(token)
        let bare = "postgres://\(server.passwordRole)@127.0.0.1:\(server.port)/\(database!)?sslmode=disable"
        let escaped = server.password.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ":", with: "\\:")
        let passFile = try harness.write("""
            # another database first, then the one the URL names
            127.0.0.1:\(server.port):elsewhere:\(server.passwordRole):not-the-password
            127.0.0.1:\(server.port):\(database!):\(server.passwordRole):\(escaped)

            """, to: ".pgpass")
        XCTAssertEqual(chmod(passFile, 0o600), 0)
        try harness.expect(0, loginArguments(cognito, session: "carol") + ["--keystore", bare], stdin: token)
        let status = try Output.jsonObject(try harness.expect(0, ["status", "--session", "carol", "--keystore", bare]).stdout)
        XCTAssertEqual(status["state"] as? String, "federated")

        // Readable by the group: not used, and the database refuses the login without it.
        XCTAssertEqual(chmod(passFile, 0o640), 0)
        let shared = try harness.expect(6, ["status", "--session", "carol", "--keystore", bare])
        XCTAssertTrue(shared.stderr.contains("group or world access"), shared.stderr)
        XCTAssertTrue(shared.stderr.contains("127.0.0.1:\(server.port)"), shared.stderr)

        // $PGPASSFILE names the file to use instead.
        let elsewhere = try harness.write("*:*:*:*:\(escaped)\n", to: "elsewhere.pgpass")
        XCTAssertEqual(chmod(elsewhere, 0o600), 0)
        try harness.expect(0, ["credentials", "--session", "carol", "--keystore", bare], environment: ["PGPASSFILE": elsewhere])
    }

    /// A passphrase, the same on two hosts, derives the same key from the salt in the database.
    func testPassphraseIsSharedThroughTheDatabase() throws {
        let cognito = try FakeCognito.served()
        let token = TestJWT.valid(sub: "passphrase-user")
        let passphrase = "correct horse battery staple, fleet-wide"
        let first = try makeHarness()
        let second = try makeHarness()
        defer {
            first.cleanUp()
            second.cleanUp()
        }
        for harness in [first, second] {
            harness.environment["IDENTITY_BROKER_KEY"] = nil
            harness.environment["IDENTITY_BROKER_PASSPHRASE"] = passphrase
            harness.neverPrinted += [passphrase, token]
        }
        try first.expect(0, loginArguments(cognito, session: "carol"), stdin: token)
        try second.expect(0, ["credentials", "--session", "carol"])
        try second.expect(6, ["credentials", "--session", "carol"], environment: ["IDENTITY_BROKER_PASSPHRASE": "another passphrase entirely"])
        // The key that matters is the one the passphrase derives, with the salt the database holds.
        let saltHex = Array(try sqlValue("SELECT encode(salt, 'hex') FROM identity_broker_key_salts WHERE access_group = ''"))
        let stored = stride(from: 0, to: saltHex.count - 1, by: 2).compactMap { UInt8(String(saltHex[$0...$0 + 1]), radix: 16) }
        let salt = try KeyDerivation.SaltFile.decode(stored, path: "identity_broker_key_salts")
        let derived = try KeyDerivation.scrypt(passphrase: SecretBytes(copying: passphrase.utf8), salt: salt.salt, parameters: salt.parameters)
        let derivedKey = derived.withUnsafeBytes { Array($0) }
        XCTAssertEqual(derivedKey.count, 32)
        try assertDumpHoldsNoSecret([FakeCognito.secretKey, FakeCognito.sessionToken, token, passphrase], keys: [derivedKey])
    }
}
