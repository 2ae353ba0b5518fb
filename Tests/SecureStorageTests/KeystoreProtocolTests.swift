import BrokerTestSupport
import SecureStorage
import XCTest

/// What every engine does the same way through the protocol: closing, telling keys apart
/// by their bytes, and refusing what no engine stores.
final class KeystoreProtocolTests: XCTestCase {
    func testTheInMemoryKeystoreClosesThroughTheProtocol() async throws {
        try await assertClosingThroughTheProtocol(InMemoryKeystore())
    }

    /// `SQLiteKeystore.close()` is synchronous, and is the protocol's `close()` as it is.
    func testTheSQLiteKeystoreClosesThroughTheProtocol() async throws {
        let temporary = try TemporaryRoot()
        try await assertClosingThroughTheProtocol(try SQLiteKeystore(root: temporary.root, service: "tool"))
    }

    func testTheInMemoryKeystoreTellsKeysApartByTheirBytes() async throws {
        try await assertCanonicallyEquivalentKeysAreTwoItems(InMemoryKeystore())
    }

    func testTheSQLiteKeystoreTellsKeysApartByTheirBytes() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        try await assertCanonicallyEquivalentKeysAreTwoItems(keystore)
    }

    func testTheInMemoryKeystoreRefusesWhatNoEngineStores() async throws {
        try await assertRefusesWhatNoEngineStores(InMemoryKeystore())
    }

    func testTheSQLiteKeystoreRefusesWhatNoEngineStores() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        try await assertRefusesWhatNoEngineStores(keystore)
    }
}
