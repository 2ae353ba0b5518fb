import XCTest
@testable import SecureStorage

/// HMAC-SHA-256 now checks libcrypto's result and throws; the happy path must still match
/// RFC 4231's published vectors.
final class DigestTests: XCTestCase {
    func testHMACSHA256MatchesRFC4231() throws {
        // Test case 1: 20-byte key of 0x0b, "Hi There".
        XCTAssertEqual(
            Digest.hex(try Digest.hmacSHA256(key: [UInt8](repeating: 0x0B, count: 20), bytes("Hi There"))),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        // Test case 2: a key shorter than the output, "Jefe".
        XCTAssertEqual(
            Digest.hex(try Digest.hmacSHA256(key: bytes("Jefe"), bytes("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // Test case 6: a key longer than the block size is hashed first.
        XCTAssertEqual(
            Digest.hex(try Digest.hmacSHA256(key: [UInt8](repeating: 0xAA, count: 131), bytes("Test Using Larger Than Block-Size Key - Hash Key First"))),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }

}
