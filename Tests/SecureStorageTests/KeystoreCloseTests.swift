import BrokerTestSupport
import SecureStorage
import XCTest

/// `Keystore.close()`: every engine closes the same way through the protocol.
final class KeystoreCloseTests: XCTestCase {
    func testTheInMemoryKeystoreClosesThroughTheProtocol() async throws {
        try await assertClosingThroughTheProtocol(InMemoryKeystore())
    }

    /// `SQLiteKeystore.close()` is synchronous, and is the protocol's `close()` as it is.
    func testTheSQLiteKeystoreClosesThroughTheProtocol() async throws {
        let temporary = try TemporaryRoot()
        try await assertClosingThroughTheProtocol(try SQLiteKeystore(root: temporary.root, service: "tool"))
    }
}
