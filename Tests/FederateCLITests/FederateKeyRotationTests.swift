import BrokerTestSupport
import Foundation
import SecureStorage
import XCTest

/// `federate rekey` (docs/cli.md, "Rotating the key"): the sessions of an access group
/// re-sealed with the current key, the old one given in `$IDENTITY_BROKER_OTHER_KEY` (or a
/// passphrase, or a key file); no key ever printed.
final class FederateKeyRotationTests: XCTestCase {
    private var harness: FederateHarness!
    private var cognito: FakeCognito!
    private let oldKey = FederateKeyRotationTests.randomKey()
    private let newKey = FederateKeyRotationTests.randomKey()

    override func setUpWithError() throws {
        harness = try FederateHarness()
        harness.notOnStderr = [FakeCognito.secretKey, FakeCognito.sessionToken]
        harness.neverPrinted = [oldKey, newKey]
        cognito = try FakeCognito.served()
    }

    override func tearDown() {
        cognito?.stopServing()
        harness?.cleanUp()
    }

    private static func randomKey() -> String {
        Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
    }

    private func guest(_ session: String, environment: [String: String?]) throws {
        try harness.expect(
            0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", session], environment: environment)
    }

    func testRekeyReSealsEverySessionWithTheCurrentKey() throws {
        for session in ["alice", "bob"] { try guest(session, environment: ["IDENTITY_BROKER_KEY": oldKey]) }

        // Without the old key, nothing opens the key check: exit 6, saying where it goes.
        let refused = try harness.expect(6, ["rekey"], environment: ["IDENTITY_BROKER_KEY": newKey])
        XCTAssertTrue(refused.stderr.contains("IDENTITY_BROKER_OTHER_KEY"), "\(refused)")
        try harness.expect(0, ["credentials", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": oldKey])

        // Before the rotation, a command that writes is refused the new key as the sealing
        // one (reads only open, and may); with the new key opening only, it works.
        let early = try harness.expect(
            6, ["clear", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": newKey, "IDENTITY_BROKER_OTHER_KEY": oldKey])
        XCTAssertTrue(early.stderr.contains("rekey"), "\(early)")
        try harness.expect(0, ["credentials", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": newKey, "IDENTITY_BROKER_OTHER_KEY": oldKey])
        try guest("carol", environment: ["IDENTITY_BROKER_KEY": oldKey, "IDENTITY_BROKER_OTHER_KEY": newKey])

        let rotated = try harness.expect(0, ["rekey"], environment: ["IDENTITY_BROKER_KEY": newKey, "IDENTITY_BROKER_OTHER_KEY": oldKey])
        XCTAssertTrue(rotated.stderr.contains("re-sealed 3 sessions with the current key (0 already were)"), "\(rotated)")
        XCTAssertEqual(rotated.stdout, "")
        for session in ["alice", "bob", "carol"] {
            try harness.expect(0, ["credentials", "--session", session], environment: ["IDENTITY_BROKER_KEY": newKey])
        }
        let old = try harness.expect(6, ["credentials", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": oldKey])
        XCTAssertTrue(old.stderr.contains("$IDENTITY_BROKER_KEY is not the key these sessions were sealed with"), "\(old)")
        let oldWriting = try harness.expect(6, ["clear", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": oldKey])
        XCTAssertTrue(oldWriting.stderr.contains("key check"), "\(oldWriting)")

        let mistyped = try harness.expect(
            0, ["rekey", "--access-group", "nobody"], environment: ["IDENTITY_BROKER_KEY": newKey, "IDENTITY_BROKER_OTHER_KEY": oldKey])
        XCTAssertTrue(mistyped.stderr.contains("holds no sessions: nothing to rotate"), "\(mistyped)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.groupDirectory("nobody")), "\(harness.keystoreFiles())")

        // A group whose sessions were all cleared keeps its key check, which moves: not "nothing".
        try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "erin", "--access-group", "ops"],
                           environment: ["IDENTITY_BROKER_KEY": oldKey])
        try harness.expect(0, ["clear", "--session", "erin", "--access-group", "ops"], environment: ["IDENTITY_BROKER_KEY": oldKey])
        let cleared = try harness.expect(
            0, ["rekey", "--access-group", "ops"], environment: ["IDENTITY_BROKER_KEY": newKey, "IDENTITY_BROKER_OTHER_KEY": oldKey])
        XCTAssertTrue(cleared.stderr.contains("re-sealed 0 sessions"), "\(cleared)")

        let again = try harness.expect(0, ["rekey"], environment: ["IDENTITY_BROKER_KEY": newKey, "IDENTITY_BROKER_OTHER_KEY": oldKey])
        XCTAssertTrue(again.stderr.contains("re-sealed 0 sessions with the current key (3 already were)"), "\(again)")
        // Without an old key there is nothing to open with: said so, naming the variables.
        let noOldKey = try harness.expect(0, ["rekey"], environment: ["IDENTITY_BROKER_KEY": newKey])
        XCTAssertTrue(
            noOldKey.stderr.contains("every session (3) is already sealed with the current key; no old key was given ($IDENTITY_BROKER_OTHER_KEY"),
            "\(noOldKey)")
    }

    /// A group rotated from an environment key to its key file keeps working while the
    /// private namespace stays sealed with the environment key, and reading a group with a
    /// key mistake makes no private key or salt.
    func testAGroupRotatedAwayFromAnEnvironmentKeyKeepsWorking() throws {
        let group = ["--access-group", "team"]
        try harness.expect(0, ["guest", "--pool-id", FakeCognito.poolId, "--endpoint", cognito.endpoint, "--session", "alice"] + group,
                           environment: ["IDENTITY_BROKER_KEY": oldKey])
        try harness.expect(0, ["status"], environment: ["IDENTITY_BROKER_KEY": oldKey])  // the private namespace's key check
        let rotated = try harness.expect(0, ["rekey"] + group, environment: ["IDENTITY_BROKER_OTHER_KEY": oldKey])
        XCTAssertTrue(rotated.stderr.contains("re-sealed 1 session "), "\(rotated)")
        try harness.expect(0, ["credentials", "--session", "alice"] + group)
        try harness.expect(0, ["clear", "--session", "alice"] + group)
        let privateDirectory = harness.keystore + "/users/\(getuid())"
        XCTAssertFalse(FileManager.default.fileExists(atPath: privateDirectory + "/key"), "a private key file was made")
        let wrong = try harness.expect(6, ["status"] + group, environment: ["IDENTITY_BROKER_PASSPHRASE": "not the group's passphrase"])
        XCTAssertTrue(wrong.stderr.contains("salt"), "\(wrong)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: privateDirectory + "/salt"), "a private salt was made")
        XCTAssertFalse(FileManager.default.fileExists(atPath: privateDirectory + "/key"), "a private key file was made")
        try harness.expect(0, ["status"], environment: ["IDENTITY_BROKER_KEY": oldKey])
    }

    /// The key file default: the old file moved aside and named by
    /// `$IDENTITY_BROKER_OTHER_KEY_FILE`, `rekey` makes a new key file.
    func testRekeyReplacesAKeyFile() throws {
        try guest("alice", environment: [:])
        let keyFile = harness.keystore + "/users/\(getuid())/key"
        let oldBytes = try XCTUnwrap(FileManager.default.contents(atPath: keyFile), "\(harness.keystoreFiles())")
        let aside = harness.keystore + "/old.key"
        XCTAssertEqual(rename(keyFile, aside), 0)

        // Between moving the key aside and the rotation, commands are told to finish it.
        let between = try harness.expect(6, ["credentials", "--session", "alice"], environment: ["IDENTITY_BROKER_OTHER_KEY_FILE": aside])
        XCTAssertTrue(between.stderr.contains("finish the rotation: run 'federate rekey'"), "\(between)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyFile), "a key file was made before the rotation")
        let rotated = try harness.expect(0, ["rekey"], environment: ["IDENTITY_BROKER_OTHER_KEY_FILE": aside])
        XCTAssertTrue(rotated.stderr.contains("re-sealed 1 session "), "\(rotated)")
        let newBytes = try XCTUnwrap(FileManager.default.contents(atPath: keyFile))
        XCTAssertNotEqual(newBytes, oldBytes)
        try harness.expect(0, ["credentials", "--session", "alice"])

        let missing = try harness.expect(6, ["rekey"], environment: ["IDENTITY_BROKER_OTHER_KEY_FILE": harness.keystore + "/nowhere.key"])
        XCTAssertTrue(missing.stderr.contains("IDENTITY_BROKER_OTHER_KEY_FILE"), "\(missing)")
    }

    func testRekeyNamesTheSessionsNoKeyOpensAndExitsSix() throws {
        for session in ["alice", "bob"] { try guest(session, environment: ["IDENTITY_BROKER_KEY": oldKey]) }
        let keystore = try SQLiteKeystore(root: harness.keystore, service: FederateHarness.service, keySource: .raw(Array(Data(base64Encoded: oldKey)!)))
        var sealed = try XCTUnwrap(try keystore.storedRow(forKey: "session.bob"))
        sealed[sealed.count / 2] ^= 1
        try keystore.replaceStoredRow(sealed, forKey: "session.bob")
        keystore.close()

        let result = try harness.expect(6, ["rekey"], environment: ["IDENTITY_BROKER_KEY": newKey, "IDENTITY_BROKER_OTHER_KEY": oldKey])
        XCTAssertTrue(result.stderr.contains("the key check moved to the current key and 1 session re-sealed with it, but 1 item open with none of the keys given"), "\(result)")
        XCTAssertTrue(result.stderr.contains("(bob)"), "\(result)")
        try harness.expect(0, ["credentials", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": newKey])
    }
}
