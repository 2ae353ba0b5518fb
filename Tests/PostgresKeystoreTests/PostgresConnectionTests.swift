import Foundation
import PostgresKeystore
import SecureStorage
import XCTest

/// What opening a keystore reports when the connection itself is refused: a failed login
/// (with its SQLSTATE, never the password) or TLS the server cannot give.
final class PostgresConnectionTests: PostgresTestCase, @unchecked Sendable {
    func testThePasswordRoleNeedsItsPassword() async throws {
        var configuration = try configuration()
        configuration.password = "wrong password"
        let error = await keystoreError {
            try await PostgresKeystore(configuration: configuration, service: "tool", keySource: .raw(self.key))
        }
        XCTAssertEqual(error?.code, .storeUnavailable)
        XCTAssertTrue(error?.reason.contains("28P01") ?? false, "\(String(describing: error))")
        XCTAssertFalse("\(String(describing: error))".contains("wrong password"))
    }

    func testTLSRequiredFromAServerWithoutTLSFailsClearly() async throws {
        for mode in [PostgresKeystore.TLSMode.require, .verifyFull] {
            let error = await keystoreError { try await self.keystore { $0.tls = mode } }
            XCTAssertEqual(error?.code, .storeUnavailable, "\(mode)")
            XCTAssertTrue(error?.reason.contains("TLS") ?? false, "\(String(describing: error))")
        }
        // `prefer` falls back to plain TCP on a server without TLS.
        let preferred = try await keystore { $0.tls = .prefer }
        try await preferred.set([1], forKey: "k")
    }
}
