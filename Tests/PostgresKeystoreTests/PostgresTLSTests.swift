import BrokerTestSupport
import Foundation
@testable import PostgresKeystore
import SecureStorage
import XCTest

/// TLS to a real PostgreSQL whose certificate a test authority signed (for 127.0.0.1): the
/// default for a server elsewhere, `verify-full`, connects with that authority given and
/// refuses without it, saying what to give. This class's server is its own, so turning TLS
/// on changes no other test.
final class PostgresTLSTests: PostgresTestCase, @unchecked Sendable {
    func testVerifyFullConnectsWithTheServersAuthorityAndSaysWhatToGiveWithoutIt() async throws {
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        try server.enableTLS(certificates)

        // The system's roots do not hold the test authority: refused, with the way out named.
        let untrusted = await keystoreError { try await self.keystore { $0.tls = .verifyFull } }
        XCTAssertEqual(untrusted?.code, .storeUnavailable, "\(String(describing: untrusted))")
        XCTAssertTrue(untrusted?.reason.contains("sslmode=verify-full checks the server's certificate") ?? false, "\(String(describing: untrusted))")
        XCTAssertTrue(untrusted?.reason.contains("sslrootcert") ?? false, "\(String(describing: untrusted))")

        let trusted = try await keystore {
            $0.tls = .verifyFull
            $0.rootCertificatePath = certificates.authorityFile
        }
        try await trusted.set([1, 2, 3], forKey: "k")
        let read = try await trusted.value(forKey: "k")
        XCTAssertEqual(read, [1, 2, 3])
        let encrypted = try server.psqlValue("""
            SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
            WHERE ssl AND application_name = 'identity-broker' AND datname = '\(database!)'
            """)
        XCTAssertGreaterThan(Int(encrypted) ?? 0, 0, "no connection of the keystore used TLS")
    }
}
