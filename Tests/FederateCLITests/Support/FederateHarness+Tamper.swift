import SecureStorage
import XCTest

extension FederateHarness {
    /// Flips one bit in the middle of `session`'s sealed row in the private SQLite keystore,
    /// as someone who can write the database file could: the row no longer authenticates.
    func tamper(_ session: String) throws {
        let store = try SQLiteKeystore(root: keystore, service: Self.service)
        defer { store.close() }
        var sealed = try XCTUnwrap(try store.storedRow(forKey: "session.\(session)"), "no sealed row for \(session)")
        sealed[sealed.count / 2] ^= 1
        try store.replaceStoredRow(sealed, forKey: "session.\(session)")
    }
}
