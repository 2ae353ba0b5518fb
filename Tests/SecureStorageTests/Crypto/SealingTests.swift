import BrokerTestSupport
import XCTest
@testable import SecureStorage

/// AES-256-GCM against the published McGrew–Viega test cases (the GCM specification's
/// appendix B, test cases 13–16: 256-bit key, 96-bit IV), which NIST's CAVP vectors include.
final class SealingTests: XCTestCase {
    struct Vector {
        var key, nonce, plaintext, aad, ciphertext, tag: String
    }

    static let vectors: [Vector] = [
        // Test case 13: empty plaintext, no AAD.
        Vector(key: String(repeating: "00", count: 32), nonce: String(repeating: "00", count: 12),
               plaintext: "", aad: "", ciphertext: "", tag: "530f8afbc74536b9a963b4f1c4cb738b"),
        // Test case 14: one zero block.
        Vector(key: String(repeating: "00", count: 32), nonce: String(repeating: "00", count: 12),
               plaintext: String(repeating: "00", count: 16), aad: "",
               ciphertext: "cea7403d4d606b6e074ec5d3baf39d18", tag: "d0d1c8a799996bf0265b98b5d48ab919"),
        // Test case 15: four blocks, no AAD.
        Vector(key: "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
               nonce: "cafebabefacedbaddecaf888",
               plaintext: "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255",
               aad: "",
               ciphertext: "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad",
               tag: "b094dac5d93471bdec1a502270e3cc6c"),
        // Test case 16: partial last block, with AAD.
        Vector(key: "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
               nonce: "cafebabefacedbaddecaf888",
               plaintext: "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
               aad: "feedfacedeadbeeffeedfacedeadbeefabaddad2",
               ciphertext: "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
               tag: "76fc6ece0f4e1768cddf8853bb2d551b"),
    ]

    func testPublishedGCMVectorsEncrypt() throws {
        for (index, vector) in Self.vectors.enumerated() {
            let key = hexBytes(vector.key)
            let result = try key.withUnsafeBytes {
                try Sealing.encrypt(key: $0, nonce: hexBytes(vector.nonce), associatedData: hexBytes(vector.aad), plaintext: hexBytes(vector.plaintext))
            }
            XCTAssertEqual(result.ciphertext, hexBytes(vector.ciphertext), "vector \(index)")
            XCTAssertEqual(result.tag, hexBytes(vector.tag), "vector \(index)")
        }
    }

    func testPublishedGCMVectorsDecryptAndRejectBadTag() throws {
        for (index, vector) in Self.vectors.enumerated() {
            let key = hexBytes(vector.key)
            let plaintext = try key.withUnsafeBytes {
                try Sealing.decrypt(key: $0, nonce: hexBytes(vector.nonce), associatedData: hexBytes(vector.aad),
                                    ciphertext: hexBytes(vector.ciphertext), tag: hexBytes(vector.tag))
            }
            XCTAssertEqual(plaintext, hexBytes(vector.plaintext), "vector \(index)")
            var badTag = hexBytes(vector.tag)
            badTag[15] ^= 0x80
            _ = assertThrows(KeystoreError.self, code: .authenticationFailed) {
                try key.withUnsafeBytes {
                    try Sealing.decrypt(key: $0, nonce: hexBytes(vector.nonce), associatedData: hexBytes(vector.aad),
                                        ciphertext: hexBytes(vector.ciphertext), tag: badTag)
                }
            }
        }
    }

    func testSealUsesFreshNonceAndVersionByte() throws {
        let key = SecretBytes(copying: [UInt8](repeating: 7, count: 32))
        let first = try Sealing.seal(bytes("same"), key: key, associatedData: bytes("ad"))
        let second = try Sealing.seal(bytes("same"), key: key, associatedData: bytes("ad"))
        XCTAssertEqual(first[0], Sealing.formatVersion)
        XCTAssertEqual(first.count, Sealing.overhead + 4)
        XCTAssertNotEqual(Array(first[1..<13]), Array(second[1..<13]), "nonces must differ")
        XCTAssertEqual(try Sealing.open(first, key: key, associatedData: bytes("ad")), bytes("same"))
        _ = assertThrows(KeystoreError.self, code: .authenticationFailed) { try Sealing.open(first, key: key, associatedData: bytes("other")) }
        _ = assertThrows(KeystoreError.self, code: .corruptFormat) { try Sealing.open(Array(first.prefix(10)), key: key, associatedData: bytes("ad")) }
    }

    /// Every engine's items are at most ``Sealing/maximumSealedBytes`` sealed: a larger value
    /// is refused before anything is encrypted, and a larger sealed item (written by whoever
    /// can write a store's rows) is refused before anything is copied or decrypted.
    func testSealedItemsAreBoundedBothWays() throws {
        let key = SecretBytes(copying: [UInt8](repeating: 7, count: Sealing.keySize))
        let largest = Sealing.maximumSealedBytes - Sealing.overhead
        let sealed = try Sealing.seal(Array(repeating: 1, count: largest), key: key, associatedData: [])
        XCTAssertEqual(sealed.count, Sealing.maximumSealedBytes)
        XCTAssertEqual(try Sealing.open(sealed, key: key, associatedData: []).count, largest)
        _ = assertThrows(KeystoreError.self, code: .valueTooLarge) {
            try Sealing.seal(Array(repeating: 1, count: largest + 1), key: key, associatedData: [])
        }
        let oversized = assertThrows(KeystoreError.self, code: .corruptFormat) {
            try Sealing.open(sealed + [0], key: key, associatedData: [])
        }
        XCTAssertTrue(oversized?.reason.contains("larger than") ?? false, String(describing: oversized))
    }

    func testBase64() {
        XCTAssertEqual(Base64.urlEncode(bytes("")), "")
        XCTAssertEqual(Base64.urlEncode(bytes("f")), "Zg")
        XCTAssertEqual(Base64.urlEncode(bytes("fo")), "Zm8")
        XCTAssertEqual(Base64.urlEncode(bytes("foo")), "Zm9v")
        XCTAssertEqual(Base64.urlEncode([0xFB, 0xFF]), "-_8")
        XCTAssertEqual(Base64.decode(bytes("Zm9vYg==")), bytes("foob"))
        XCTAssertEqual(Base64.decode(bytes("Zm9vYmE")), bytes("fooba"))
        XCTAssertEqual(Base64.decode(bytes("+/8=")), [0xFB, 0xFF])
        XCTAssertNil(Base64.decode(bytes("Z")))
        XCTAssertNil(Base64.decode(bytes("Zm9v!")))
    }

    /// Keys accept one spelling per byte string: RFC 4648 §4 with exact padding and zero
    /// unused bits, whitespace only around the text.
    func testCanonicalBase64() {
        // RFC 4648 §10.
        for (text, encoded) in [("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")] {
            XCTAssertEqual(Base64.decodeCanonical(bytes(encoded)), bytes(text), encoded)
            XCTAssertEqual(Base64.decodeCanonical(bytes(" \t\(encoded)\r\n")), bytes(text), encoded)
        }
        XCTAssertEqual(Base64.decodeCanonical(bytes("+/8=")), [0xFB, 0xFF])
        for text in ["", "  ", "Zg", "Zg=", "Zg===", "Zh==", "Zm9=", "Zm8", "Z===", "====", "Zm=v", "Zm9vYg=a",
                     "Zm9v Yg==", "Zm9v\nYg==", "-_8=", "Zm9v!A==", "Zg==Zg=="] {
            XCTAssertNil(Base64.decodeCanonical(bytes(text)), text.debugDescription)
        }
    }
}
