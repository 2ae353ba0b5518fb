import Foundation
import Glibc
import XCTest

/// A shared access group used by two Unix users of one group, as two tools
/// running under different accounts would: each writes, and each reads the
/// other's items. Needs root (to run the helper under other uids with
/// `setpriv`); CI runs as root.
final class SharedGroupAcrossUsersTests: XCTestCase {
    private static let groupId = 60_000
    private static let setpriv = "/usr/bin/setpriv"

    /// Runs `keystore-stress shared …` as `uid` in the shared Unix group; returns status and stdout.
    private func runShared(as uid: Int, root: String, key: String) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.setpriv)
        process.arguments = [
            "--reuid=\(uid)", "--regid=\(Self.groupId)", "--clear-groups",
            try stressExecutable().path, "shared", root, "svc", "team", key,
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    func testTwoUsersOfOneGroupShareItems() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: Self.setpriv) else {
            throw XCTSkip("needs root and setpriv to act as two users of one Unix group")
        }
        let temporary = try TemporaryRoot()
        // The helper runs as other users: the path to the root must be traversable.
        XCTAssertEqual(chmod(temporary.path, 0o711), 0)
        let root = temporary.path + "/shared-root"
        XCTAssertEqual(mkdir(root, 0o770), 0)
        XCTAssertEqual(chown(root, 0, gid_t(Self.groupId)), 0)
        XCTAssertEqual(chmod(root, 0o2770), 0)

        let alice = try runShared(as: 60_001, root: root, key: "alice")
        XCTAssertEqual(alice.status, 0, alice.output)
        // Bob opens the group directory, key and locks that Alice created.
        let bob = try runShared(as: 60_002, root: root, key: "bob")
        XCTAssertEqual(bob.status, 0, bob.output)
        XCTAssertEqual(bob.output, "alice=from-60001\nbob=from-60002\n")
        let aliceAgain = try runShared(as: 60_001, root: root, key: "alice2")
        XCTAssertEqual(aliceAgain.status, 0, aliceAgain.output)
        XCTAssertEqual(aliceAgain.output, "alice=from-60001\nalice2=from-60001\nbob=from-60002\n")
    }
}
