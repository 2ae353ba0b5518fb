import BrokerTestSupport
import Foundation
import XCTest

/// Exit 6: tampered items, wrong keys, bad permissions; and recovering with `clear`.
final class FederateKeystoreTests: XCTestCase {
    private var harness: FederateHarness!
    private var server: LoopbackHTTPServer!

    override func setUpWithError() throws {
        harness = try FederateHarness()
        harness.notOnStderr = [CannedCognito.secretKey, CannedCognito.sessionToken]
        server = try CannedCognito.healthy()
    }

    override func tearDown() {
        server?.stop()
        harness?.cleanUp()
    }

    private func guest(_ session: String, environment: [String: String?] = [:]) throws {
        try harness.expect(0, ["guest", "--pool-id", CannedCognito.poolId, "--endpoint", server.url(), "--session", session], environment: environment)
    }

    private static func randomKey() -> String {
        Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
    }

    func testTamperedItemExitsSixAndClearRecovers() throws {
        try guest("alice")
        let items = harness.sessionItemFiles()
        XCTAssertEqual(items.count, 1, "one sealed item for one session: \(items)")
        let item = try XCTUnwrap(items.first)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: item))
        bytes[bytes.count / 2] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: item))

        let credentials = try harness.expect(6, ["credentials", "--session", "alice"])
        XCTAssertTrue(credentials.stderr.contains("authenticationFailed"), "\(credentials)")
        try harness.expect(6, ["status", "--session", "alice"])
        try harness.expect(6, ["guest", "--pool-id", CannedCognito.poolId, "--endpoint", server.url(), "--session", "bob"])

        // clear still works on the damaged session, and then everything is usable again.
        try harness.expect(0, ["clear", "--session", "alice"])
        try harness.expect(3, ["credentials", "--session", "alice"])
        try guest("alice")
        try harness.expect(0, ["credentials", "--session", "alice"])
    }

    func testTruncatedItemExitsSix() throws {
        try guest("alice")
        let item = try XCTUnwrap(harness.sessionItemFiles().first)
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: item))
        try harness.expect(6, ["credentials", "--session", "alice"])
    }

    func testWrongEnvironmentKeyExitsSix() throws {
        let key = Self.randomKey()
        let wrong = Self.randomKey()
        harness.neverPrinted = [key, wrong]
        try guest("alice", environment: ["IDENTITY_BROKER_KEY": key])
        try harness.expect(0, ["credentials", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": key])
        let result = try harness.expect(6, ["credentials", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": wrong])
        XCTAssertTrue(result.stderr.contains("IDENTITY_BROKER_KEY"), "the error says what to check: \(result)")
        // Without the variable the key file is used, which did not seal this item either.
        try harness.expect(6, ["credentials", "--session", "alice"], environment: ["IDENTITY_BROKER_KEY": nil])
    }

    func testMigrateWithWrongKeyExitsSixAndMovesNothing() throws {
        let key = Self.randomKey()
        let wrong = Self.randomKey()
        harness.neverPrinted = [key, wrong]
        for session in ["alice", "bob", "carol"] {
            try guest(session, environment: ["IDENTITY_BROKER_KEY": key])
        }
        let before = harness.sessionItemFiles()
        XCTAssertEqual(before.count, 3)

        let result = try harness.expect(6, ["migrate", "--from", "none", "--to", "team"], environment: ["IDENTITY_BROKER_KEY": wrong])
        XCTAssertTrue(result.stderr.contains("3 of 3 items could not be opened"), "the error says how many: \(result)")
        XCTAssertTrue(result.stderr.contains("wrong key or tampered"), "the error says why: \(result)")
        XCTAssertTrue(result.stderr.contains("IDENTITY_BROKER_KEY"), "the error says what to check: \(result)")
        // Nothing moved, nothing deleted, no journal left for a later command to resume.
        XCTAssertEqual(harness.sessionItemFiles(), before)
        let journals = (FileManager.default.subpaths(atPath: harness.keystore) ?? []).filter { $0.hasSuffix("migration.journal") }
        XCTAssertEqual(journals, [])
        for session in ["alice", "bob", "carol"] {
            try harness.expect(0, ["credentials", "--session", session], environment: ["IDENTITY_BROKER_KEY": key])
            try harness.expect(3, ["credentials", "--session", session, "--access-group", "team"], environment: ["IDENTITY_BROKER_KEY": key])
        }

        // The right key moves them all.
        let moved = try harness.expect(0, ["migrate", "--from", "none", "--to", "team"], environment: ["IDENTITY_BROKER_KEY": key])
        XCTAssertTrue(moved.stderr.contains("moved 3 items"), "\(moved)")
        try harness.expect(0, ["credentials", "--session", "alice", "--access-group", "team"], environment: ["IDENTITY_BROKER_KEY": key])
    }

    func testMigrateWithTamperedItemExitsSixAndMovesNothing() throws {
        for session in ["alice", "bob"] { try guest(session) }
        let items = harness.sessionItemFiles()
        XCTAssertEqual(items.count, 2)
        let item = try XCTUnwrap(items.first)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: item))
        bytes[bytes.count / 2] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: item))

        let result = try harness.expect(6, ["migrate", "--from", "none", "--to", "team"])
        XCTAssertTrue(result.stderr.contains("1 of 2 items could not be opened"), "\(result)")
        XCTAssertEqual(harness.sessionItemFiles(), items)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: item)), bytes)
    }

    func testMalformedEnvironmentKeyExitsSix() throws {
        try guest("default")
        let notBase64 = try harness.expect(6, ["credentials"], environment: ["IDENTITY_BROKER_KEY": "not base64!"])
        XCTAssertTrue(notBase64.stderr.contains("IDENTITY_BROKER_KEY"), "\(notBase64)")
        try harness.expect(6, ["credentials"], environment: ["IDENTITY_BROKER_KEY": Data(repeating: 7, count: 16).base64EncodedString()])
        try harness.expect(6, ["guest", "--pool-id", CannedCognito.poolId, "--endpoint", server.url()], environment: ["IDENTITY_BROKER_KEY": "short"])
    }

    func testReplacedKeyFileExitsSix() throws {
        try guest("alice")
        let keyFile = try XCTUnwrap(
            FileManager.default.subpaths(atPath: harness.keystore)?.first { $0.hasPrefix("private/") && $0.hasSuffix("/key") })
        let path = harness.keystore + "/" + keyFile
        try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o600)
        try harness.expect(6, ["credentials", "--session", "alice"])
    }

    func testInsecurePermissionsExitSix() throws {
        try guest("alice")
        XCTAssertEqual(chmod(harness.keystore, 0o755), 0)
        let result = try harness.expect(6, ["credentials", "--session", "alice"])
        XCTAssertTrue(result.stderr.contains("chmod"), "the error says how to fix it: \(result)")
        XCTAssertEqual(chmod(harness.keystore, 0o700), 0)
        try harness.expect(0, ["credentials", "--session", "alice"])
    }

    func testKeystoreItemsHoldNoPlaintextSecrets() throws {
        try guest("alice")
        for item in harness.sessionItemFiles() {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: item))
            for secret in [CannedCognito.secretKey, CannedCognito.sessionToken, CannedCognito.accessKeyId] {
                XCTAssertNil(bytes.range(of: Data(secret.utf8)), "an item holds a credential in plain text")
            }
        }
    }
}
