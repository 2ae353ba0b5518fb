import Foundation
import Logging
import InMemoryLogging
import XCTest
@testable import SecureStorage

final class FileKeystoreTests: XCTestCase {
    func testRoundTrip() throws {
        let temporary = try TemporaryRoot()
        let keystore = try FileKeystore(root: temporary.root, service: "tool")
        XCTAssertNil(try keystore.data(forKey: "missing"))
        _ = assertKeystoreError(.itemNotFound) { try keystore.requireData(forKey: "missing") }

        try keystore.set(bytes("one"), forKey: "session.alice")
        try keystore.set([], forKey: "empty")
        let large = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try keystore.set(large, forKey: "large")
        try keystore.set(bytes("ü"), forKey: "../../etc/passwd ✓")
        XCTAssertEqual(string(try keystore.data(forKey: "session.alice")), "one")
        XCTAssertEqual(try keystore.data(forKey: "empty"), [])
        XCTAssertEqual(try keystore.data(forKey: "large"), large)
        XCTAssertEqual(string(try keystore.data(forKey: "../../etc/passwd ✓")), "ü")
        XCTAssertEqual(try keystore.keys(), ["../../etc/passwd ✓", "empty", "large", "session.alice"])

        try keystore.set(bytes("two"), forKey: "session.alice")
        XCTAssertEqual(string(try keystore.requireData(forKey: "session.alice")), "two")

        // A second instance (another process would be the same) sees the same items.
        let reopened = try FileKeystore(root: temporary.root, service: "tool")
        XCTAssertEqual(string(try reopened.data(forKey: "session.alice")), "two")

        try keystore.remove(forKey: "session.alice")
        try keystore.remove(forKey: "session.alice")
        XCTAssertNil(try reopened.data(forKey: "session.alice"))
        try keystore.removeAll()
        XCTAssertEqual(try reopened.keys(), [])

        // No path traversal: every item lives in the namespace directory.
        XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.root + "/etc"))
    }

    func testServicesAndGroupsAreSeparateNamespaces() throws {
        let temporary = try TemporaryRoot()
        let a = try FileKeystore(root: temporary.root, service: "a", keySource: .raw([UInt8](repeating: 1, count: 32)))
        let b = try FileKeystore(root: temporary.root, service: "b", keySource: .raw([UInt8](repeating: 1, count: 32)))
        try a.set(bytes("a"), forKey: "k")
        XCTAssertNil(try b.data(forKey: "k"))
        try b.removeAll()
        XCTAssertEqual(string(try a.data(forKey: "k")), "a")
    }

    func testInvalidNames() throws {
        let temporary = try TemporaryRoot()
        _ = assertKeystoreError(.invalidName) { try FileKeystore(root: temporary.root, service: "") }
        _ = assertKeystoreError(.invalidName) { try FileKeystore(root: temporary.root, service: "s", accessGroup: AccessGroup(name: "")) }
        let keystore = try FileKeystore(root: temporary.root, service: "tool")
        _ = assertKeystoreError(.invalidName) { try keystore.set([1], forKey: "") }
        _ = assertKeystoreError(.invalidName) { try keystore.data(forKey: String(repeating: "x", count: 181)) }
        try keystore.set([1], forKey: String(repeating: "x", count: 180))
    }

    func testTamperingWithAnyByteFailsAuthentication() throws {
        let temporary = try TemporaryRoot()
        let keystore = try FileKeystore(root: temporary.root, service: "tool")
        let secret = "AKIA-secret-value-123"
        try keystore.set(bytes(secret), forKey: "session")
        let path = keystore.namespace.itemPath(forKey: "session")
        let original = try XCTUnwrap(FileManager.default.contents(atPath: path))
        for position in 0..<original.count {
            var tampered = original
            tampered[position] ^= 0x01
            try tampered.write(to: URL(fileURLWithPath: path))
            let error = assertKeystoreError(.authenticationFailed) { try keystore.data(forKey: "session") }
            XCTAssertFalse("\(String(describing: error))".contains(secret))
        }
        // Truncation below the sealed overhead is a corrupt format; any other length fails auth.
        try original.prefix(5).write(to: URL(fileURLWithPath: path))
        _ = assertKeystoreError(.corruptFormat) { try keystore.data(forKey: "session") }
        try original.dropLast().write(to: URL(fileURLWithPath: path))
        _ = assertKeystoreError(.authenticationFailed) { try keystore.data(forKey: "session") }
        try original.write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(string(try keystore.data(forKey: "session")), secret)
    }

    func testItemMovedUnderAnotherKeyServiceOrGroupFailsAuthentication() throws {
        let temporary = try TemporaryRoot()
        let key = KeySource.raw([UInt8](repeating: 9, count: 32))
        let privateStore = try FileKeystore(root: temporary.root, service: "tool", keySource: key)
        try privateStore.set(bytes("value"), forKey: "alice")
        let source = privateStore.namespace.itemPath(forKey: "alice")

        // Another key name.
        try FileManager.default.copyItem(atPath: source, toPath: privateStore.namespace.itemPath(forKey: "bob"))
        _ = assertKeystoreError(.authenticationFailed) { try privateStore.data(forKey: "bob") }

        // Another service, same key.
        let other = try FileKeystore(root: temporary.root, service: "other", keySource: key)
        try FileManager.default.copyItem(atPath: source, toPath: other.namespace.itemPath(forKey: "alice"))
        _ = assertKeystoreError(.authenticationFailed) { try other.data(forKey: "alice") }

        // Another group, same key and service.
        let shared = try FileKeystore(root: temporary.root, service: "tool", accessGroup: AccessGroup(name: "team"), keySource: key)
        try FileManager.default.copyItem(atPath: source, toPath: shared.namespace.itemPath(forKey: "alice"))
        _ = assertKeystoreError(.authenticationFailed) { try shared.data(forKey: "alice") }
    }

    func testWrongKeyFailsAuthentication() throws {
        let temporary = try TemporaryRoot()
        let first = try FileKeystore(root: temporary.root, service: "tool", keySource: .raw([UInt8](repeating: 1, count: 32)))
        try first.set(bytes("value"), forKey: "alice")
        let second = try FileKeystore(root: temporary.root, service: "tool", keySource: .raw([UInt8](repeating: 2, count: 32)))
        _ = assertKeystoreError(.authenticationFailed) { try second.data(forKey: "alice") }
        _ = assertKeystoreError(.invalidKey) { try FileKeystore(root: temporary.root, service: "tool", keySource: .raw([1, 2, 3])) }
    }

    func testKeyFileIsCreatedOncePerGroupAndReused() throws {
        let temporary = try TemporaryRoot()
        let first = try FileKeystore(root: temporary.root, service: "tool")
        try first.set(bytes("v"), forKey: "k")
        let keyPath = first.namespace.layout.keyFilePath(.none)
        XCTAssertEqual(mode(of: keyPath), 0o600)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: keyPath)[.size] as? Int, 32)
        let second = try FileKeystore(root: temporary.root, service: "tool")
        XCTAssertEqual(string(try second.data(forKey: "k")), "v")
    }

    func testLoggingNeverContainsSecrets() throws {
        let temporary = try TemporaryRoot()
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test", factory: { _ in handler })
        logger.logLevel = .trace
        let keystore = try FileKeystore(root: temporary.root, service: "tool", accessGroup: .none, logger: logger)
        try keystore.set(bytes("very-secret-token"), forKey: "alice")
        _ = try keystore.data(forKey: "alice")
        try keystore.remove(forKey: "alice")
        XCTAssertFalse(handler.entries.isEmpty)
        for entry in handler.entries {
            let text = "\(entry.message) \(entry.metadata)"
            XCTAssertFalse(text.contains("very-secret-token"))
            for key in entry.metadata.keys { XCTAssertTrue(key.hasPrefix("broker."), key) }
        }
    }

    func testReadLatency() throws {
        let temporary = try TemporaryRoot()
        let keystore = try FileKeystore(root: temporary.root, service: "tool")
        try keystore.set(Array(repeating: 65, count: 1_500), forKey: "session")
        let iterations = 2_000
        let clock = ContinuousClock()
        let elapsed = try clock.measure {
            for _ in 0..<iterations { _ = try keystore.data(forKey: "session") }
        }
        // Informational only: tests never depend on wall-clock speed.
        print("FileKeystore.data(forKey:) mean: \(elapsed / iterations)")
    }
}
