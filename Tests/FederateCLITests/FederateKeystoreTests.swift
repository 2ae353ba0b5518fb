import BrokerTestSupport
import Foundation
import SecureStorage
import XCTest

/// Exit 6 on the SQLite keystore (`<root>/users/<uid>/<b64 service>.sqlite`, key file
/// `<root>/users/<uid>/key`): tampered rows, corrupt databases, wrong or replaced keys, bad
/// permissions, refused migrations; and recovering with `clear`. Every failing run is one
/// stderr line and an empty stdout, without a secret (checked by the harness).
final class FederateKeystoreTests: XCTestCase {
    private var harness: FederateHarness!
    private var cognito: FakeCognito!

    override func setUpWithError() throws {
        harness = try FederateHarness()
        harness.notOnStderr = [FakeCognito.secretKey, FakeCognito.sessionToken]
        cognito = try FakeCognito.served()
    }

    override func tearDown() {
        cognito?.stopServing()
        harness?.cleanUp()
    }

    private func guest(_ session: String, group: String? = nil, environment: [String: String?] = [:]) throws {
        var arguments = ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", session]
        if let group { arguments += ["--access-group", group] }
        try harness.expect(0, arguments, environment: environment)
    }

    private func credentials(_ session: String, group: String? = nil) -> [String] {
        ["credentials", "--session", session] + (group.map { ["--access-group", $0] } ?? [])
    }

    private static func randomKey() -> String {
        Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
    }

    private func mode(_ path: String) -> mode_t {
        var info = stat()
        XCTAssertEqual(lstat(path, &info), 0, path)
        return info.st_mode & 0o7777
    }

    /// The private database's rows, each its key and sealed value in hex, read as someone with
    /// access to the file could (no keystore opened).
    private func rows(file: StaticString = #filePath, line: UInt = #line) throws -> [String] {
        let rows = try SQLiteKeystore.storedRows(ofDatabase: harness.database())
        XCTAssertFalse(rows.isEmpty, "no rows", file: file, line: line)
        return rows.map { row in row.key + " " + row.sealed.map { String(format: "%02x", $0) }.joined() }
    }

    /// Removes the `-wal` and `-shm` files a process may leave (committed data still in the
    /// WAL would otherwise stand in for the damaged pages).
    private func dropSiblings(of database: String) {
        for suffix in ["-wal", "-shm"] { _ = unlink(database + suffix) }
    }

    func testTamperedRowFailsThatSessionOnlyAndClearRecovers() async throws {
        try guest("alice")
        try guest("bob")
        XCTAssertTrue(FileManager.default.fileExists(atPath: harness.database()), "the layout changed: \(harness.keystoreFiles())")
        try harness.tamper("alice")

        let damaged = try harness.expect(6, credentials("alice"))
        XCTAssertTrue(damaged.stderr.contains("authenticationFailed"), "\(damaged)")
        XCTAssertTrue(damaged.stderr.contains("clear"), "the error says how to recover: \(damaged)")
        try harness.expect(6, ["status", "--session", "alice"])
        // A damaged item is an error for that session alone.
        try harness.expect(0, credentials("bob"))
        try harness.expect(0, ["status", "--session", "bob"])
        try guest("carol")

        // clear removes the damaged row without opening it; the session is then usable again.
        try harness.expect(0, ["clear", "--session", "alice"])
        try harness.expect(3, credentials("alice"))
        try guest("alice")
        try harness.expect(0, credentials("alice"))
        try harness.expect(0, credentials("bob"))
    }

    func testARowSealedWithAnotherKeyFailsThatSessionOnly() async throws {
        try guest("alice")
        try guest("bob")
        // A process with another key is refused when it opens (the key check), so the row is
        // planted as someone who can write the file could.
        let keystore = try SQLiteKeystore(root: harness.keystore, service: FederateHarness.service)
        try keystore.replaceStoredRow(
            sealing: Array(#"{"version":1}"#.utf8), withKey: (0..<32).map { _ in UInt8.random(in: 0...255) }, forKey: "session.alice")
        keystore.close()
        let result = try harness.expect(6, credentials("alice"))
        XCTAssertTrue(result.stderr.contains("authenticationFailed"), "\(result)")
        try harness.expect(0, credentials("bob"))
    }

    /// A home whose `~/.local/share` is a link elsewhere (dotfiles set-ups do this), and a
    /// `--keystore` that is itself a link: the store is used where the links lead.
    func testLinksOnTheWayToTheKeystoreAreFollowed() throws {
        let home = harness.directory + "/linked-home"
        let elsewhere = harness.directory + "/elsewhere"
        try FileManager.default.createDirectory(atPath: home + "/.local", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        XCTAssertEqual(symlink(elsewhere, home + "/.local/share"), 0)
        let byDefault: [String: String?] = ["HOME": home, "IDENTITY_BROKER_KEYSTORE": nil]
        try guest("linked", environment: byDefault)
        try harness.expect(0, credentials("linked"), environment: byDefault)
        XCTAssertTrue(FileManager.default.fileExists(atPath: elsewhere + "/identity-broker/users"), "the store lives where the link leads")

        let linkedKeystore = harness.directory + "/keystore-link"
        XCTAssertEqual(symlink(elsewhere + "/identity-broker", linkedKeystore), 0)
        try harness.expect(0, credentials("linked"), environment: ["IDENTITY_BROKER_KEYSTORE": linkedKeystore])
    }

    /// `HOME=/` (an arbitrary UID in a container, systemd's `DynamicUser=`): the default
    /// keystore would be `/.local/share/identity-broker`, which such a user cannot create, and
    /// failed later as a bare permission error. For a user who cannot write `/` it is a usage
    /// error (2) saying what to pass; root keeps that default (single slash); a home with a
    /// trailing slash works.
    func testAHomeOfSlashAsksForAKeystoreDirectoryUnlessItCanBeMadeThere() throws {
        let slash: [String: String?] = ["HOME": "/", "IDENTITY_BROKER_KEYSTORE": nil, "XDG_DATA_HOME": nil]
        if getuid() == 0 {
            let root = try harness.expect(3, credentials("x"), environment: slash)
            XCTAssertTrue(root.stderr.contains("keystore /.local/share/identity-broker"), root.stderr)
            guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else {
                throw missingPrerequisite("setpriv, to run federate as nobody")
            }
            let nobody = try harness.run(
                credentials("x"), environment: slash, launcher: ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
            XCTAssertEqual(nobody.status, 2, "\(nobody)")
            XCTAssertTrue(nobody.stderr.contains("HOME is /"), nobody.stderr)
            XCTAssertTrue(nobody.stderr.contains("--keystore"), nobody.stderr)
        } else {
            let user = try harness.expect(2, credentials("x"), environment: slash)
            XCTAssertTrue(user.stderr.contains("HOME is /"), user.stderr)
        }
        let home = harness.directory + "/home-with-slash"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        let trailing: [String: String?] = ["HOME": home + "/", "IDENTITY_BROKER_KEYSTORE": nil, "XDG_DATA_HOME": nil]
        try guest("slashed", environment: trailing)
        try harness.expect(0, credentials("slashed"), environment: trailing)
        XCTAssertTrue(FileManager.default.fileExists(atPath: home + "/.local/share/identity-broker/users"))
    }

    /// A volume everyone can write, not sticky, above the keystore (a Kubernetes `emptyDir`):
    /// refused with a hint, and usable once `IDENTITY_BROKER_WAY_TO_ROOT_CHECK=off` says no
    /// other user shares it; what is below the keystore directory is checked either way.
    func testAWorldWritableVolumeOpensOnlyWithTheWayToRootCheckOff() throws {
        let volume = harness.directory + "/volume"
        XCTAssertEqual(mkdir(volume, 0o700), 0)
        XCTAssertEqual(chmod(volume, 0o777), 0)
        let keystore = volume + "/identity-broker"
        let checked: [String: String?] = ["IDENTITY_BROKER_KEYSTORE": keystore]
        let off: [String: String?] = ["IDENTITY_BROKER_KEYSTORE": keystore, "IDENTITY_BROKER_WAY_TO_ROOT_CHECK": "off"]

        let refused = try harness.expect(6, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "pod"],
                                         environment: checked)
        XCTAssertTrue(refused.stderr.contains("\(volume) is writable by others and not sticky"), "\(refused)")
        XCTAssertTrue(refused.stderr.contains("IDENTITY_BROKER_WAY_TO_ROOT_CHECK=off"), "the error names the switch: \(refused)")

        try guest("pod", environment: off)
        try harness.expect(0, credentials("pod"), environment: off)
        try harness.expect(0, ["status", "--session", "pod"], environment: off)
        try harness.expect(6, credentials("pod"), environment: checked)
        try harness.expect(6, ["status", "--session", "pod"], environment: checked)
        try harness.expect(2, credentials("pod"), environment: ["IDENTITY_BROKER_KEYSTORE": keystore, "IDENTITY_BROKER_WAY_TO_ROOT_CHECK": "no"])

        XCTAssertEqual(chmod("\(keystore)/users/\(geteuid())", 0o755), 0)
        let below = try harness.expect(6, credentials("pod"), environment: off)
        XCTAssertTrue(below.stderr.contains("chmod 700"), "below the keystore directory is still checked: \(below)")
    }

    func testTruncatedDatabaseExitsSix() throws {
        try guest("alice")
        let database = harness.database()
        dropSiblings(of: database)
        let handle = try XCTUnwrap(FileHandle(forWritingAtPath: database))
        try handle.truncate(atOffset: 50)
        try handle.close()
        for arguments in [credentials("alice"), ["status", "--session", "alice"], ["clear", "--session", "alice"]] {
            let result = try harness.expect(6, arguments)
            XCTAssertTrue(result.stderr.contains("corruptFormat"), "\(result)")
            XCTAssertTrue(result.stderr.contains(database), "the error names the file: \(result)")
        }
    }

    /// A keystore directory on a read-only mount (a volume a container mounts read-only):
    /// SQLite must create the database's `-wal` and `-shm` files even to read, so every
    /// command fails; the error names the mount rather than SQLite's later `ENOENT`. Bound
    /// read-only over itself in a mount namespace of the test's own.
    func testAKeystoreOnAReadOnlyMountIsNamedAsSuch() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else {
            throw missingPrerequisite("root and unshare, to mount the keystore directory read-only in a mount namespace")
        }
        try guest("alice")
        dropSiblings(of: harness.database())
        let launcher = [
            "/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
            #"/bin/mount --bind "$0" "$0" && /bin/mount -o remount,bind,ro "$0" && exec "$@""#,
            harness.keystore,
        ]
        for arguments in [credentials("alice"), ["status", "--session", "alice"]] {
            let result = try harness.run(arguments, launcher: launcher)
            XCTAssertEqual(result.status, 6, "\(result)")
            XCTAssertTrue(result.stderr.contains("mounted read-only"), "the error names the cause: \(result)")
            XCTAssertTrue(result.stderr.contains("mount the keystore directory read-write"), "the error says what to do: \(result)")
            XCTAssertFalse(result.stderr.contains("No such file"), "SQLite's fallback errno is not the cause: \(result)")
        }
        // Writable again, the same keystore serves the session.
        try harness.expect(0, credentials("alice"))
        // A first login on an empty read-only keystore directory: the directories and key
        // file cannot be made, which says so too.
        let empty = harness.directory + "/empty-keystore"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: false)
        let login = try harness.run(
            ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--keystore", empty],
            launcher: Array(launcher.dropLast()) + [empty])
        XCTAssertEqual(login.status, 6, "\(login)")
        XCTAssertTrue(login.stderr.contains("Read-only file system"), "the error names the cause: \(login)")
        XCTAssertTrue(login.stderr.contains("mount the keystore directory read-write"), "the error says what to do: \(login)")
    }

    func testCorruptDatabaseHeaderExitsSix() throws {
        try guest("alice")
        let database = harness.database()
        dropSiblings(of: database)
        let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: database))
        try handle.write(contentsOf: Data(repeating: 0x5A, count: 100))
        try handle.close()
        let result = try harness.expect(6, credentials("alice"))
        XCTAssertTrue(result.stderr.contains("corruptFormat"), "\(result)")
        XCTAssertTrue(result.stderr.contains("move it aside"), "the error says what to do: \(result)")
        try harness.expect(6, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "bob"])
    }

    func testWrongEnvironmentKeyExitsSix() throws {
        let key = Self.randomKey()
        let wrong = Self.randomKey()
        harness.neverPrinted = [key, wrong]
        try guest("alice", environment: ["IDENTITY_BROKER_KEY": key])
        try harness.expect(0, credentials("alice"), environment: ["IDENTITY_BROKER_KEY": key])
        let result = try harness.expect(6, credentials("alice"), environment: ["IDENTITY_BROKER_KEY": wrong])
        XCTAssertTrue(result.stderr.contains("$IDENTITY_BROKER_KEY is not the key these sessions were sealed with"), "\(result)")
        XCTAssertTrue(result.stderr.contains("if the key that sealed them is lost, nothing opens them again: start over in another keystore"), "and what to do without it: \(result)")
        // The commands that read without opening the keystore in full meet the key check too:
        // a session that does not exist is not reported as not federated under a wrong key.
        for arguments in [credentials("nobody"), ["status", "--session", "nobody"], ["status", "--session", "alice"]] {
            let run = try harness.expect(6, arguments, environment: ["IDENTITY_BROKER_KEY": wrong])
            XCTAssertTrue(run.stderr.contains("$IDENTITY_BROKER_KEY is not the key these sessions were sealed with"), "\(arguments): \(run)")
            harness.assertOneErrorLine(run)
        }
        // Without the variable the key file is used, which does not exist: none is made.
        try harness.expect(6, credentials("alice"), environment: ["IDENTITY_BROKER_KEY": nil])
        // A command that opens the keystore in full meets the key check, and is told which key
        // to give back, not to make up a new one.
        let cleared = try harness.expect(6, ["clear", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": wrong])
        XCTAssertTrue(cleared.stderr.contains("$IDENTITY_BROKER_KEY is not the key these sessions were sealed with"), "\(cleared)")
        XCTAssertFalse(cleared.stderr.contains("openssl rand"), "\(cleared)")
        let withKeyFile = try harness.expect(6, ["clear", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": nil])
        XCTAssertTrue(withKeyFile.stderr.contains("these sessions were sealed with $IDENTITY_BROKER_KEY or $IDENTITY_BROKER_PASSPHRASE (no key file exists)"), "\(withKeyFile)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.privateKeyFile), "a key file was made over the environment key's sessions")
    }

    func testMalformedEnvironmentKeyExitsSix() throws {
        // Refused before anything is opened: every command says so, on a keystore that does
        // not exist yet too (where status would otherwise report a session not federated).
        for (variable, arguments) in [
            ("IDENTITY_BROKER_KEY", ["status"]), ("IDENTITY_BROKER_KEY", ["clear"]), ("IDENTITY_BROKER_KEY", ["credentials"]),
            ("IDENTITY_BROKER_OTHER_KEY", ["status"]), ("IDENTITY_BROKER_OTHER_KEY", ["rekey"]),
        ] {
            let run = try harness.expect(6, arguments, environment: [variable: "not base64!"])
            XCTAssertTrue(run.stderr.contains("environment variable \(variable) is not canonical base64"), "\(run)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "\(arguments) created the keystore")
        }
        // Set but empty (a secret that did not load) is not unset: read as unset, a first
        // login would seal with a key file made on the spot.
        for variable in [
            "IDENTITY_BROKER_KEY", "IDENTITY_BROKER_PASSPHRASE",
            "IDENTITY_BROKER_OTHER_KEY", "IDENTITY_BROKER_OTHER_PASSPHRASE", "IDENTITY_BROKER_OTHER_KEY_FILE",
        ] {
            for arguments in [["status"], ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint]] {
                let run = try harness.expect(6, arguments, environment: [variable: ""])
                XCTAssertTrue(run.stderr.contains("$\(variable) is set but empty"), "\(run)")
                harness.assertOneErrorLine(run)
                XCTAssertFalse(FileManager.default.fileExists(atPath: harness.keystore), "\(variable): \(arguments) created the keystore")
            }
        }
        // $IDENTITY_BROKER_KEY_FILE is read for a database only: a directory ignores it.
        try harness.expect(0, ["status"], environment: ["IDENTITY_BROKER_KEY_FILE": ""])
        let database = try harness.expect(6, ["status", "--keystore", "postgres://broker@127.0.0.1:9/db"], environment: ["IDENTITY_BROKER_KEY_FILE": ""])
        XCTAssertTrue(database.stderr.contains("$IDENTITY_BROKER_KEY_FILE is set but empty"), "\(database)")
        try guest("default")
        let notBase64 = try harness.expect(6, ["credentials"], environment: ["IDENTITY_BROKER_KEY": "not base64!"])
        XCTAssertTrue(notBase64.stderr.contains("IDENTITY_BROKER_KEY"), "\(notBase64)")
        try harness.expect(6, ["credentials"], environment: ["IDENTITY_BROKER_KEY": Data(repeating: 7, count: 16).base64EncodedString()])
        try harness.expect(6, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint], environment: ["IDENTITY_BROKER_KEY": "short"])
    }

    func testReplacedKeyFileExitsSix() throws {
        try guest("alice")
        let keyFile = harness.privateKeyFile
        let original = try XCTUnwrap(FileManager.default.contents(atPath: keyFile), "no key file: \(harness.keystoreFiles())")
        XCTAssertEqual(original.count, 32)
        XCTAssertEqual(mode(keyFile), 0o600)
        let replacement = Data((0..<32).map { _ in UInt8.random(in: 0...255) })
        try replacement.write(to: URL(fileURLWithPath: keyFile))
        XCTAssertEqual(chmod(keyFile, 0o600), 0)
        let result = try harness.expect(6, credentials("alice"))
        XCTAssertTrue(result.stderr.contains("the key file is not the key these sessions were sealed with"), "\(result)")
        // A key file of the wrong size is refused outright.
        try Data(original.prefix(16)).write(to: URL(fileURLWithPath: keyFile))
        let short = try harness.expect(6, credentials("alice"))
        XCTAssertTrue(short.stderr.contains("invalidKey"), "\(short)")
        // The original key opens the session again.
        try original.write(to: URL(fileURLWithPath: keyFile))
        try harness.expect(0, credentials("alice"))
    }

    /// The private directory `chmod 000`ed by hand: every command on the session exits 6
    /// saying so; none reads it as "no session", and `clear` does not report it cleared.
    func testAPrivateDirectoryClosedByHandStopsEveryCommand() throws {
        try guest("alice")
        // Last modified two seconds ago, as a directory chmod-ed by hand a while after its last write is.
        var twoSecondsAgo = [timespec(tv_sec: time(nil) - 2, tv_nsec: 0), timespec(tv_sec: time(nil) - 2, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, harness.userDirectory, &twoSecondsAgo, 0), 0)
        XCTAssertEqual(chmod(harness.userDirectory, 0), 0)
        defer { _ = chmod(harness.userDirectory, 0o700) }
        for arguments in [credentials("alice"), ["status", "--session", "alice"], ["clear", "--session", "alice"]] {
            let result = try harness.expect(6, arguments)
            XCTAssertTrue(result.stderr.contains("has mode 000 but holds entries: chmod 700 it"), "\(result)")
        }
        XCTAssertEqual(chmod(harness.userDirectory, 0o700), 0)
        try harness.expect(0, credentials("alice"))
    }

    /// A database its user may not open (mode 000: strict enough for the permission check,
    /// refused by the kernel) says so, not "full disk, links or a hung process". Run as
    /// another user: root opens any file.
    func testADatabaseTheUserMayNotOpenSaysSo() throws {
        let setpriv = "/usr/bin/setpriv"
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: setpriv) else {
            throw missingPrerequisite("needs root and setpriv to run federate as a user the kernel refuses a file")
        }
        let nobody: uid_t = 65534
        let directory = "/tmp/ib-refused-\(UUID().uuidString.prefix(8))"
        XCTAssertEqual(mkdir(directory, 0o700), 0)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        XCTAssertEqual(chown(directory, nobody, gid_t(nobody)), 0)
        let keystore = directory + "/ks"
        let asNobody = [setpriv, "--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups"]
        let made = try harness.run(
            ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "alice", "--keystore", keystore], launcher: asNobody)
        XCTAssertEqual(made.status, 0, "\(made)")
        let database = "\(keystore)/users/\(nobody)/\(FederateHarness.base64URL(FederateHarness.service)).sqlite"
        XCTAssertEqual(chmod(database, 0), 0)
        let refused = try harness.run(["credentials", "--session", "alice", "--keystore", keystore], launcher: asNobody)
        XCTAssertEqual(refused.status, 6, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("this user may not open the keystore's database: check its owner and mode"), "\(refused)")
    }

    func testInsecurePermissionsExitSixWithTheFix() throws {
        try guest("alice")
        let cases: [(path: String, looser: mode_t, fixed: mode_t, says: String)] = [
            (harness.userDirectory, 0o755, 0o700, "chmod 700"),
            (harness.database(), 0o644, 0o600, "chmod 600"),
            (harness.privateKeyFile, 0o644, 0o600, "chmod 600"),
        ]
        for (path, looser, fixed, says) in cases {
            XCTAssertEqual(chmod(path, looser), 0)
            let result = try harness.expect(6, credentials("alice"))
            XCTAssertTrue(result.stderr.contains("insecurePermissions"), "\(result)")
            XCTAssertTrue(result.stderr.contains(path), "the error names the path: \(result)")
            XCTAssertTrue(result.stderr.contains("0\(String(looser, radix: 8))"), "the error shows the mode found: \(result)")
            XCTAssertTrue(result.stderr.contains(says), "the error says how to fix it: \(result)")
            XCTAssertEqual(chmod(path, fixed), 0)
            try harness.expect(0, credentials("alice"))
        }
        // A keystore that is a file is not fixed by chmod.
        let file = try harness.write("not a keystore", to: "afile")
        let notADirectory = try harness.expect(6, ["clear", "--keystore", file])
        XCTAssertTrue(notADirectory.stderr.contains("must be a directory of yours"), "\(notADirectory)")
        XCTAssertFalse(notADirectory.stderr.contains("chmod"), "\(notADirectory)")
        // A group-writable root must be sticky.
        XCTAssertEqual(chmod(harness.keystore, 0o770), 0)
        let root = try harness.expect(6, credentials("alice"))
        XCTAssertTrue(root.stderr.contains("chmod +t"), "\(root)")
        XCTAssertEqual(chmod(harness.keystore, 0o700), 0)
        try harness.expect(0, credentials("alice"))
    }

    func testMigrateWithWrongKeyExitsSixAndMovesNothing() throws {
        let key = Self.randomKey()
        let wrong = Self.randomKey()
        harness.neverPrinted = [key, wrong]
        for session in ["alice", "bob", "carol"] {
            try guest(session, environment: ["IDENTITY_BROKER_KEY": key])
        }
        let before = try rows()

        let result = try harness.expect(6, ["migrate", "--from", "none", "--to", "team"], environment: ["IDENTITY_BROKER_KEY": wrong])
        XCTAssertTrue(result.stderr.contains("key check"), "the error says why: \(result)")
        XCTAssertTrue(result.stderr.contains("IDENTITY_BROKER_KEY"), "the error says what to check: \(result)")
        // Nothing moved, nothing deleted: the source rows are the same and no target was created.
        XCTAssertEqual(try rows(), before)
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.groupDirectory("team")), "\(harness.keystoreFiles())")
        for session in ["alice", "bob", "carol"] {
            try harness.expect(0, credentials(session), environment: ["IDENTITY_BROKER_KEY": key])
            try harness.expect(3, credentials(session, group: "team"), environment: ["IDENTITY_BROKER_KEY": key])
        }

        // The right key moves them all.
        let moved = try harness.expect(0, ["migrate", "--from", "none", "--to", "team"], environment: ["IDENTITY_BROKER_KEY": key])
        XCTAssertTrue(moved.stderr.contains("moved 3 items"), "\(moved)")
        XCTAssertEqual(moved.stdout, "")
        try harness.expect(0, credentials("alice", group: "team"), environment: ["IDENTITY_BROKER_KEY": key])
        try harness.expect(3, credentials("alice"), environment: ["IDENTITY_BROKER_KEY": key])
    }

    /// docs/cli.md, `migrate`: a target whose key check the key does not open exits 6 before
    /// anything is copied; both sides keep what they held.
    func testMigrateIntoATargetSealedWithAnotherKeyExitsSixAndMovesNothing() throws {
        let (key, other) = (Self.randomKey(), Self.randomKey())
        harness.neverPrinted = [key, other]
        try guest("alice", environment: ["IDENTITY_BROKER_KEY": key])
        try guest("bob", group: "team", environment: ["IDENTITY_BROKER_KEY": other])
        let before = try rows()
        let result = try harness.expect(6, ["migrate", "--from", "none", "--to", "team"], environment: ["IDENTITY_BROKER_KEY": key])
        XCTAssertTrue(result.stderr.contains("key check"), "the error says why: \(result)")
        XCTAssertEqual(try rows(), before)
        try harness.expect(0, credentials("alice"), environment: ["IDENTITY_BROKER_KEY": key])
        try harness.expect(0, credentials("bob", group: "team"), environment: ["IDENTITY_BROKER_KEY": other])
        try harness.expect(3, credentials("alice", group: "team"), environment: ["IDENTITY_BROKER_KEY": other])
    }

    func testMigrateWithTamperedRowExitsSixAndMovesNothing() async throws {
        for session in ["alice", "bob"] { try guest(session) }
        try harness.tamper("bob")
        let before = try rows()
        let result = try harness.expect(6, ["migrate", "--from", "none", "--to", "team"])
        XCTAssertTrue(result.stderr.contains("1 of 2 items"), "\(result)")
        XCTAssertTrue(result.stderr.contains("session.bob"), "the error names the damaged item: \(result)")
        XCTAssertEqual(try rows(), before)
        try harness.expect(3, credentials("alice", group: "team"))
        // Clearing the damaged session lets the rest move.
        try harness.expect(0, ["clear", "--session", "bob"])
        let moved = try harness.expect(0, ["migrate", "--from", "none", "--to", "team"])
        XCTAssertTrue(moved.stderr.contains("moved 1 item "), "\(moved)")
        try harness.expect(0, credentials("alice", group: "team"))
    }

    func testMigrateThenCredentialsInTheNewGroup() throws {
        try guest("alice")
        try guest("bob")
        let moved = try harness.expect(0, ["migrate", "--from", "none", "--to", "ops-tools"])
        XCTAssertTrue(moved.stderr.contains("moved 2 items from access group none to ops-tools"), "\(moved)")
        let output = try harness.expect(0, credentials("alice", group: "ops-tools"))
        try Output.assertProcessShape(output.stdout)
        try harness.expect(0, credentials("bob", group: "ops-tools"))
        try harness.expect(3, credentials("alice"))
        // The shared group's layout: a setgid 2770 directory, its own key (0640), a 0660 database.
        XCTAssertEqual(mode(harness.groupDirectory("ops-tools")), 0o2770)
        XCTAssertEqual(mode(harness.groupDirectory("ops-tools") + "/key"), 0o640)
        XCTAssertEqual(mode(harness.database(group: "ops-tools")), 0o660)
        // Running it again has nothing left to move.
        let again = try harness.expect(0, ["migrate", "--from", "none", "--to", "ops-tools"])
        XCTAssertTrue(again.stderr.contains("moved 0 items") && again.stderr.contains("holds none here"), "\(again)")
        // The same group on both sides is a mistake, not a migration of nothing.
        let same = try harness.expect(2, ["migrate", "--from", "ops-tools", "--to", "ops-tools"])
        XCTAssertTrue(same.stderr.contains("same access group"), "\(same)")
    }

    func testReadingCommandsWithAMistypedGroupCreateAndRecordNothing() throws {
        try guest("alice", group: "ops-tools")
        let files = harness.keystoreFiles()
        let status = try harness.expect(0, ["status", "--session", "alice", "--access-group", "ops-tolos"])
        XCTAssertEqual(try Output.jsonObject(status.stdout)["state"] as? String, "notFederated")
        let missing = try harness.expect(3, credentials("alice", group: "ops-tolos"))
        XCTAssertTrue(missing.stderr.contains("no session 'alice' in access group 'ops-tolos' of keystore"), "\(missing)")
        try harness.expect(0, ["clear", "--session", "alice", "--access-group", "ops-tolos"])
        let exec = try harness.expect(3, ["exec", "--session", "alice", "--access-group", "ops-tolos", "--", "true"])
        XCTAssertTrue(exec.stderr.contains("nothing is saved in access group 'ops-tolos'"), "\(exec)")
        // Nothing made for the mistyped group, and the last group is still the real one: the
        // session reads back through the one-connection path, which needs it recorded.
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.groupDirectory("ops-tolos")))
        XCTAssertEqual(harness.keystoreFiles().filter { !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") },
                       files.filter { !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") })
        try harness.expect(0, credentials("alice", group: "ops-tools"))
    }

    /// docs/cli.md, "Passphrase": the key derived from `$IDENTITY_BROKER_PASSPHRASE` and a salt
    /// kept where the key file would be; another passphrase, or none, cannot read the sessions
    /// (6); both variables set is a usage error (2).
    func testAPassphraseKeysADirectoryKeystore() throws {
        let passphrase = ["IDENTITY_BROKER_PASSPHRASE": "correct horse battery staple"]
        harness.neverPrinted += ["correct horse battery staple"]
        try guest("alice", environment: passphrase)
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.privateKeyFile), "a key file was written beside the passphrase")
        XCTAssertEqual(mode(harness.userDirectory + "/salt"), 0o600)
        try harness.expect(0, credentials("alice"), environment: passphrase)
        let other = try harness.expect(6, credentials("alice"), environment: ["IDENTITY_BROKER_PASSPHRASE": "another passphrase entirely"])
        XCTAssertTrue(other.stderr.contains("key"), "\(other)")
        let otherClear = try harness.expect(6, ["clear", "--session", "alice"], environment: ["IDENTITY_BROKER_PASSPHRASE": "another passphrase entirely"])
        XCTAssertTrue(otherClear.stderr.contains("$IDENTITY_BROKER_PASSPHRASE is not the passphrase these sessions were sealed with"), "\(otherClear)")
        // Without the passphrase, no key file is made over its sessions (it would open none
        // of them and be used by every later run), and the advice names the passphrase.
        for arguments in [credentials("alice"), ["status", "--session", "alice"], ["status", "--session", "nobody"]] {
            let run = try harness.expect(6, arguments)
            XCTAssertTrue(run.stderr.contains("these sessions were sealed with $IDENTITY_BROKER_KEY or $IDENTITY_BROKER_PASSPHRASE (no key file exists)"), "\(arguments): \(run)")
            harness.assertOneErrorLine(run)
        }
        try harness.expect(6, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "bob"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.privateKeyFile), "a key file was made over the passphrase's sessions")
        let both = try harness.expect(2, credentials("alice"), environment: passphrase.merging(["IDENTITY_BROKER_KEY": Self.randomKey()]) { $1 })
        XCTAssertTrue(both.stderr.contains("IDENTITY_BROKER_PASSPHRASE") && both.stderr.contains("IDENTITY_BROKER_KEY"), "\(both)")
        try harness.expect(0, credentials("alice"), environment: passphrase)
    }

    /// docs/cli.md, exit 6: the store busy past its timeout (5 s). A process holding the
    /// database's write lock makes a login wait that long and fail with one line that says
    /// so; the saved session stays readable meanwhile (WAL readers never wait).
    func testAStoreLockedPastTheBusyTimeoutExitsSix() throws {
        try guest("alice")
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        holder.arguments = ["python3", "-c", """
            import sqlite3, sys, time
            connection = sqlite3.connect(sys.argv[1], isolation_level=None)
            connection.execute("BEGIN IMMEDIATE")
            print("locked", flush=True)
            time.sleep(30)
            """, harness.database()]
        let output = Pipe()
        holder.standardOutput = output
        try holder.run()
        defer { holder.terminate(); holder.waitUntilExit() }
        // Printed once the lock is held; a pipe may hand it over in pieces.
        var printed = ""
        while !printed.contains("locked") {
            let piece = output.fileHandleForReading.availableData
            guard !piece.isEmpty else { break }
            printed += String(decoding: piece, as: UTF8.self)
        }
        XCTAssertTrue(printed.hasPrefix("locked"), "the lock holder did not start: \(printed)")
        try harness.expect(0, credentials("alice"))
        let started = Date()
        let busy = try harness.expect(6, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "bob"])
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 4, "it did not wait for the lock")
        XCTAssertTrue(busy.stderr.contains("locked") || busy.stderr.contains("busy"), "\(busy)")
        harness.assertOneErrorLine(busy)
    }

    func testKeystoreFilesHoldNoPlaintextSecrets() throws {
        try guest("alice")
        let files = harness.keystoreFiles()
        XCTAssertTrue(files.contains { $0.hasSuffix(".sqlite") }, "no database: \(files)")
        for file in files {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: harness.keystore + "/" + file))
            for secret in [FakeCognito.secretKey, FakeCognito.sessionToken, FakeCognito.accessKeyId] {
                XCTAssertNil(bytes.range(of: Data(secret.utf8)), "\(file) holds a credential in plain text")
            }
        }
        // And only the engine's files: no lock, temporary or journal files of our own.
        let names = Set(files.map { ($0 as NSString).lastPathComponent })
        let database = FederateHarness.base64URL(FederateHarness.service) + ".sqlite"
        XCTAssertEqual(names.subtracting(["key", database, database + "-wal", database + "-shm"]), [], "\(files)")
    }
}
