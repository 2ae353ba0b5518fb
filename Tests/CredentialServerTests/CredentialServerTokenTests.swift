import BrokerTestSupport
@testable import CredentialServer
import XCTest

/// The bearer token: 256 random bits, hex, compared in constant time, never shown.
final class CredentialServerTokenTests: XCTestCase {
    func testTokensAre256RandomBitsInHex() {
        var seen = Set<String>()
        for _ in 0..<64 {
            let token = CredentialServerToken.random()
            XCTAssertEqual(token.value.count, 64)
            XCTAssertTrue(token.value.allSatisfy { "0123456789abcdef".contains($0) }, token.value)
            seen.insert(token.value)
        }
        XCTAssertEqual(seen.count, 64, "every token differs")
        XCTAssertEqual(CredentialServerToken.byteCount * 8, 256)
    }

    func testGeneratorBytesBecomeHexDigits() {
        var generator = CountingGenerator()
        let token = CredentialServerToken.random(using: &generator)
        XCTAssertEqual(token.value.count, 64)
        XCTAssertNotEqual(token.value, String(repeating: "0", count: 64))
        // Each byte gives its high digit, then its low one (a byte whose halves differ, so
        // a nibble used twice or the two swapped would show; whichever bytes of the
        // generator's words the standard library takes).
        var constant = ConstantGenerator(word: 0x1F1F_1F1F_1F1F_1F1F)
        XCTAssertEqual(CredentialServerToken.random(using: &constant).value, String(repeating: "1f", count: 32))
    }

    func testPresentedTokenMatchesOnlyExactly() {
        let token = CredentialServerToken.random()
        let value = token.value
        XCTAssertTrue(token.isPresented(in: value))
        XCTAssertTrue(token.isPresented(in: "Bearer " + value))
        XCTAssertTrue(token.isPresented(in: "bearer " + value))
        XCTAssertFalse(token.isPresented(in: nil))
        XCTAssertFalse(token.isPresented(in: ""))
        XCTAssertFalse(token.isPresented(in: "Bearer "))
        XCTAssertFalse(token.isPresented(in: " " + value))
        XCTAssertFalse(token.isPresented(in: value + " "))
        XCTAssertFalse(token.isPresented(in: value.uppercased() == value ? "x" : value.uppercased()))
        XCTAssertFalse(token.isPresented(in: "Bearer Bearer " + value))
        XCTAssertTrue(token.isPresented(in: "BEARER " + value))
        XCTAssertFalse(token.isPresented(in: "Bearer\u{0}" + value), "only a space ends the scheme")
        XCTAssertFalse(token.isPresented(in: "Basic  " + value))
        XCTAssertFalse(token.isPresented(in: "Beärer " + value), "a scheme of other bytes, the same length in characters")
        // A value whose length cannot be a token's is refused before any comparison (the
        // time of a refusal must not grow with what the client sends).
        for length in [0, 63, 65, 70, 72, 80_000] {
            XCTAssertNil(CredentialServerToken.presented(in: String(repeating: "a", count: length)), "\(length) bytes")
        }
        XCTAssertEqual(CredentialServerToken.presented(in: "bEaReR " + value), Array(value.utf8))
        // A difference at any position, and any other length, is refused.
        let bytes = Array(value.utf8)
        for index in bytes.indices {
            var changed = bytes
            changed[index] = changed[index] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
            XCTAssertFalse(token.isPresented(in: String(decoding: changed, as: UTF8.self)), "difference at \(index)")
            XCTAssertFalse(token.isPresented(in: String(decoding: bytes[..<index], as: UTF8.self)), "prefix of \(index)")
        }
        XCTAssertFalse(token.isPresented(in: value + value))
    }

    /// The comparison the server uses (``CredentialServerToken/isPresented(in:)`` calls
    /// ``ConstantTime/equals(_:_:)``): every difference counts, and lengths that differ by a
    /// multiple of 256 (which the folded length check cannot see) still differ. That it has
    /// no early exit is its construction's, not something a test here can time.
    func testConstantTimeEquality() {
        let expected = Array("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".utf8)
        XCTAssertTrue(ConstantTime.equals(expected, expected))
        XCTAssertFalse(ConstantTime.equals([], expected))
        XCTAssertFalse(ConstantTime.equals(expected + [0x30], expected))
        XCTAssertFalse(ConstantTime.equals(Array(expected.prefix(63)), expected))
        // Equal for all of `expected`: only the length check can tell (320 ^ 64 folds to 0).
        let long = expected + Array(repeating: UInt8(ascii: "0"), count: 256)
        XCTAssertFalse(ConstantTime.equals(long, expected))
        XCTAssertTrue(ConstantTime.equals([], []))
        for index in expected.indices {
            var changed = expected
            changed[index] ^= 0x01
            XCTAssertFalse(ConstantTime.equals(changed, expected), "\(index)")
        }
    }

    /// No early exit: every byte of `expected` is read whether the first difference is at
    /// the start, at the end, or nowhere, and whatever `presented`'s length.
    func testConstantTimeEqualityReadsEveryExpectedByte() {
        let expected = Array("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".utf8)
        var differing = expected
        differing[0] ^= 0x01
        var lastDiffers = expected
        lastDiffers[63] ^= 0x01
        for presented in [expected, differing, lastDiffers, [], Array(expected.prefix(10)), expected + expected] {
            let counted = CountedBytes(expected)
            _ = ConstantTime.equals(presented, counted)
            XCTAssertEqual(counted.indicesRead, Set(expected.indices), "presented of \(presented.count) bytes")
        }
    }

    func testTheTokenIsNeverShown() {
        let token = CredentialServerToken.random()
        var dumped = ""
        dump(token, to: &dumped)
        for shown in [token.description, token.debugDescription, "\(token)", String(reflecting: token), dumped] {
            XCTAssertNil(leakedRun(in: shown, of: [token.value]), shown)
        }
    }
}

/// A deterministic generator for the hex conversion test.
/// A generator that gives one word again and again.
private struct ConstantGenerator: RandomNumberGenerator {
    let word: UInt64
    mutating func next() -> UInt64 { word }
}

private struct CountingGenerator: RandomNumberGenerator {
    var state: UInt64 = 0x0123_4567_89AB_CDEF
    mutating func next() -> UInt64 {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return state
    }
}

/// Bytes that remember which of their indices were read.
private final class CountedBytes: RandomAccessCollection {
    private let bytes: [UInt8]
    private(set) var indicesRead: Set<Int> = []
    init(_ bytes: [UInt8]) { self.bytes = bytes }
    var startIndex: Int { bytes.startIndex }
    var endIndex: Int { bytes.endIndex }
    subscript(position: Int) -> UInt8 {
        indicesRead.insert(position)
        return bytes[position]
    }
}
