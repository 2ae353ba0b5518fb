import Foundation
import XCTest

/// A test case with a fresh private directory (0700) for keystores, removed after each test.
class KeystoreRootTestCase: XCTestCase {
    /// The directory of this test.
    var root: String!

    override func setUpWithError() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("broker-\(type(of: self))-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        root = dir.path
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }
}
