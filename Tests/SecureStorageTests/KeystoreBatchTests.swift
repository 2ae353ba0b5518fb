import BrokerTestSupport
import XCTest
import SecureStorage

/// A batch holds plaintext values (a session's secret key and session token): however it is
/// printed or dumped, only keys, versions and sizes show.
final class KeystoreBatchTests: XCTestCase {
    func testABatchNeverShowsItsValues() {
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        var batch = KeystoreBatch()
        batch.set(Array(secret.utf8), forKey: "session.alice", version: 42)
        batch.set(Array(secret.utf8), forKey: "session.bob")
        batch.remove(forKey: "session.carol")
        var dumped = ""
        dump(batch, to: &dumped)
        var dumpedOperation = ""
        dump(batch.operations[0], to: &dumpedOperation)
        let renderings = [
            "\(batch)", String(describing: batch), String(reflecting: batch), dumped,
            "\(batch.operations[0])", String(reflecting: batch.operations[0]), dumpedOperation,
        ]
        // The bytes as decimal numbers, as default reflection shows an array of them.
        let decimal = Array(secret.utf8).prefix(6).map(String.init).joined(separator: ", ")
        for rendering in renderings {
            XCTAssertNil(leakedRun(in: rendering, of: [secret, decimal]), rendering)
            XCTAssertTrue(rendering.contains("session.alice"), rendering)
        }
        XCTAssertEqual("\(batch)", "KeystoreBatch(set(session.alice, 40 bytes, version 42), set(session.bob, 40 bytes), remove(session.carol))")
    }
}
