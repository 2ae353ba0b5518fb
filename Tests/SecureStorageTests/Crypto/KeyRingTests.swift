import BrokerTestSupport
import XCTest
@testable import SecureStorage

/// `KeyRing`: the sealing key first, the others only on a failed authentication, each key once.
final class KeyRingTests: XCTestCase {
    private let binding = ItemBinding(service: "tool", group: .none)
    private func key(_ byte: UInt8) -> SecretBytes { SecretBytes(copying: [UInt8](repeating: byte, count: 32)) }

    func testTheSealingKeyOpensFirstAndTheOthersOnlyWhenItFails() throws {
        let ring = KeyRing(sealing: key(1), opening: [key(2), key(3)])
        let bySealing = try binding.seal(Array("one".utf8), with: key(1), forKey: "k")
        let byThird = try binding.seal(Array("three".utf8), with: key(3), forKey: "k")
        let first = try ring.open(bySealing, binding: binding, forKey: "k")
        XCTAssertEqual(first.value, Array("one".utf8))
        XCTAssertEqual(first.opener, .sealing)
        let third = try ring.open(byThird, binding: binding, forKey: "k")
        XCTAssertEqual(third.value, Array("three".utf8))
        XCTAssertEqual(third.opener, .opening)
        XCTAssertTrue(ring.opens(byThird, binding: binding, forKey: "k"))
        // Bound to its name: another key's name opens with no key of the ring.
        XCTAssertFalse(ring.opens(byThird, binding: binding, forKey: "other"))
    }

    func testAnItemNoKeyOpensFailsWithTheSealingKeysErrorAndACorruptOneAsCorrupt() throws {
        let ring = KeyRing(sealing: key(1), opening: [key(2)])
        let foreign = try binding.seal(Array("x".utf8), with: key(9), forKey: "k")
        let error = assertThrows(KeystoreError.self, code: .authenticationFailed) { try ring.open(foreign, binding: self.binding, forKey: "k") }
        XCTAssertTrue(error?.reason.contains("item 'k'") ?? false, error?.reason ?? "")
        assertThrows(KeystoreError.self, code: .corruptFormat) { try ring.open([1, 2, 3], binding: self.binding, forKey: "k") }
    }

    func testAKeyGivenTwiceOrEqualToTheSealingKeyIsTriedOnce() {
        let ring = KeyRing(sealing: key(1), opening: [key(1), key(2), key(2), key(3)])
        XCTAssertEqual(ring.opening.count, 2)
        XCTAssertEqual(ring.opening.map { $0.withUnsafeBytes { Array($0) }.first }, [2, 3])
    }
}
