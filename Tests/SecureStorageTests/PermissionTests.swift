import Foundation
import XCTest
@testable import SecureStorage

final class PermissionTests: XCTestCase {
    func testCreatedModes() throws {
        let temporary = try TemporaryRoot()
        let privateStore = try FileKeystore(root: temporary.root, service: "tool")
        try privateStore.set([1], forKey: "k")
        XCTAssertEqual(mode(of: temporary.root), 0o700)
        XCTAssertEqual(mode(of: privateStore.namespace.directory), 0o700)
        XCTAssertEqual(mode(of: privateStore.namespace.itemPath(forKey: "k")), 0o600)

        let shared = try FileKeystore(root: temporary.root, service: "tool", accessGroup: AccessGroup(name: "team"))
        try shared.set([1], forKey: "k")
        XCTAssertEqual(mode(of: shared.namespace.directory), 0o2770)
        XCTAssertEqual(mode(of: shared.namespace.layout.groupDirectory(shared.accessGroup)), 0o2770)
        XCTAssertEqual(mode(of: shared.namespace.layout.keyFilePath(shared.accessGroup)), 0o640)
        XCTAssertEqual(mode(of: shared.namespace.itemPath(forKey: "k")), 0o640)
    }

    func testLooserRootIsRefused() throws {
        let temporary = try TemporaryRoot()
        _ = try FileKeystore(root: temporary.root, service: "tool")
        XCTAssertEqual(chmod(temporary.root, 0o755), 0)
        let error = assertKeystoreError(.insecurePermissions) { try FileKeystore(root: temporary.root, service: "tool") }
        XCTAssertEqual(error?.path, temporary.root)
        XCTAssertEqual(error.flatMap(\.mode).map { $0 & 0o777 }, 0o755)
        XCTAssertTrue(error?.description.contains("0755") ?? false, error?.description ?? "")
    }

    func testLooserPrivateNamespaceIsRefused() throws {
        let temporary = try TemporaryRoot()
        let keystore = try FileKeystore(root: temporary.root, service: "tool")
        XCTAssertEqual(chmod(keystore.namespace.directory, 0o750), 0)
        let error = assertKeystoreError(.insecurePermissions) { try FileKeystore(root: temporary.root, service: "tool") }
        XCTAssertEqual(error?.path, keystore.namespace.directory)
    }

    func testLooserKeyFileIsRefused() throws {
        let temporary = try TemporaryRoot()
        let keystore = try FileKeystore(root: temporary.root, service: "tool")
        let keyPath = keystore.namespace.layout.keyFilePath(.none)
        for looser: mode_t in [0o640, 0o604, 0o660, 0o700] {
            XCTAssertEqual(chmod(keyPath, looser), 0)
            let error = assertKeystoreError(.insecurePermissions) { try FileKeystore(root: temporary.root, service: "tool") }
            XCTAssertEqual(error?.path, keyPath)
        }
        XCTAssertEqual(chmod(keyPath, 0o400), 0)
        _ = try FileKeystore(root: temporary.root, service: "tool")
    }

    func testSharedGroupLimits() throws {
        let temporary = try TemporaryRoot()
        let group = AccessGroup(name: "team")
        let keystore = try FileKeystore(root: temporary.root, service: "tool", accessGroup: group)
        let keyPath = keystore.namespace.layout.keyFilePath(group)
        XCTAssertEqual(chmod(keyPath, 0o660), 0)
        _ = assertKeystoreError(.insecurePermissions) { try FileKeystore(root: temporary.root, service: "tool", accessGroup: group) }
        XCTAssertEqual(chmod(keyPath, 0o644), 0)
        _ = assertKeystoreError(.insecurePermissions) { try FileKeystore(root: temporary.root, service: "tool", accessGroup: group) }
        XCTAssertEqual(chmod(keyPath, 0o640), 0)
        let groupDirectory = keystore.namespace.layout.groupDirectory(group)
        XCTAssertEqual(chmod(groupDirectory, 0o2775), 0)
        let error = assertKeystoreError(.insecurePermissions) { try FileKeystore(root: temporary.root, service: "tool", accessGroup: group) }
        XCTAssertEqual(error?.path, groupDirectory)
        XCTAssertEqual(chmod(groupDirectory, 0o2770), 0)
        _ = try FileKeystore(root: temporary.root, service: "tool", accessGroup: group)
    }

    func testSymbolicLinkItemIsRefused() throws {
        let temporary = try TemporaryRoot()
        let keystore = try FileKeystore(root: temporary.root, service: "tool")
        try "x".write(toFile: temporary.path + "/outside", atomically: true, encoding: .utf8)
        XCTAssertEqual(symlink(temporary.path + "/outside", keystore.namespace.itemPath(forKey: "link")), 0)
        _ = assertKeystoreError(.insecurePermissions) { try keystore.data(forKey: "link") }
    }
}
