@testable import Federation
import Foundation
import XCTest

/// The stored record's direct reader (`StoredReader`) against JSONDecoder: every record the
/// encoder writes is read directly, to the same value; anything else is left to JSONDecoder.
final class StoredRecordTests: XCTestCase {
    private func read(_ bytes: [UInt8]) -> SessionRecord.Stored? {
        var reader = StoredReader(bytes)
        return reader.read()
    }

    private func credentials(_ secret: String, _ token: String, _ expiration: Double) -> AWSCredentials {
        AWSCredentials(accessKeyId: "ASIAEXAMPLE", secretAccessKey: secret, sessionToken: token, expiration: Date(timeIntervalSince1970: expiration))
    }

    func testEveryEncodedRecordIsReadDirectlyAsJSONDecoderReadsIt() throws {
        let awkward = "a/b\\c\"d\n\t\r\u{8}\u{c}\u{1}\u{1f}\u{7f} é 😀 </script>"
        let records: [SessionRecord] = [
            SessionRecord(phase: .federated, identityId: "us-east-1:abc", provider: "google", credentials: credentials("wJalr/K7MDENG+bPx", "FwoGZX/IvYXdz==", 4_102_444_800)),
            SessionRecord(phase: .federated, identityId: "id", provider: nil, credentials: credentials(awkward, awkward, 1_700_003_600.5)),
            SessionRecord(phase: .federated, identityId: awkward, provider: "oidc:" + awkward, credentials: credentials("s", "t", 0.1)),
            SessionRecord(phase: .federated, identityId: nil, provider: nil, credentials: credentials("s", "t", 1e-7)),
            SessionRecord(phase: .terminated, identityId: "id", provider: "facebook", credentials: nil),
            SessionRecord(phase: .federated, identityId: nil, provider: nil, credentials: nil),
            SessionRecord(phase: .federated, identityId: "id", provider: "google", credentials: credentials("s", "t", 1_700_000_000), versionFloor: 1_700_043_200_000),
            SessionRecord(phase: .federated, identityId: "id", provider: nil, credentials: credentials("s", "t", 1_700_000_000), versionFloor: -(1 << 62) + 5),
        ]
        for record in records {
            let bytes = try record.storedBytes(session: "s")
            let direct = try XCTUnwrap(read(bytes), String(decoding: bytes, as: UTF8.self))
            let decoded = try JSONDecoder().decode(SessionRecord.Stored.self, from: Data(bytes))
            XCTAssertEqual(direct, decoded, String(decoding: bytes, as: UTF8.self))
            XCTAssertEqual(try SessionRecord(stored: bytes, session: "s"), record)
        }
    }

    /// A later federation stored under the version of the record it replaced: the version is
    /// the floor, and a record without one (every earlier release's) keeps its own; an earlier
    /// release, reading through JSONDecoder, skips the member and reads the record.
    func testAVersionFloorLiftsTheStoreVersionAndEarlierReadersSkipIt() throws {
        let short = SessionRecord(phase: .federated, identityId: "id", provider: "google", credentials: credentials("s", "t", 1_700_003_600))
        let long = SessionRecord(phase: .federated, identityId: "id", provider: "google", credentials: credentials("s", "t", 1_700_043_200))
        let latest = Date(timeIntervalSince1970: 1_700_000_000 + 36 * 3600)
        XCTAssertNil(long.versionFloor(replacing: short, notAfter: latest), "a later expiration needs no floor")
        var replacing = short
        replacing.versionFloor = short.versionFloor(replacing: long, notAfter: latest)
        XCTAssertEqual(replacing.versionFloor, long.storeVersion)
        XCTAssertEqual(replacing.storeVersion, long.storeVersion)
        XCTAssertEqual(short.storeVersion, 1_700_003_600_000)
        // Kinds never lift one another: a guest stays below every login, a terminated record above all.
        let guest = SessionRecord(phase: .federated, identityId: "id", provider: nil, credentials: credentials("s", "t", 1_700_000_000))
        XCTAssertNil(guest.versionFloor(replacing: long, notAfter: latest))
        XCTAssertNil(short.versionFloor(replacing: SessionRecord(phase: .terminated, identityId: "id", provider: "google", credentials: nil), notAfter: latest))

        // A floor planted in the store (by whoever can write it) stays within its kind: it
        // neither lifts a guest over a login nor a login to a terminated record's version, and
        // a later federation carries at most a floor of the longest credentials from now.
        var planted = short
        planted.versionFloor = .max
        XCTAssertEqual(planted.storeVersion, 9_000_000_000_000_000)
        var plantedGuest = guest
        plantedGuest.versionFloor = 9_000_000_000_000_001
        XCTAssertLessThan(plantedGuest.storeVersion, short.storeVersion)
        XCTAssertEqual(short.versionFloor(replacing: planted, notAfter: latest), 1_700_129_600_000)

        struct EarlierRelease: Decodable, Equatable { var version: Int; var phase: String; var identityId: String?; var expiration: Double? }
        let bytes = try replacing.storedBytes(session: "s")
        XCTAssertTrue(String(decoding: bytes, as: UTF8.self).contains("\"versionFloor\":1700043200000"))
        XCTAssertEqual(
            try JSONDecoder().decode(EarlierRelease.self, from: Data(bytes)),
            EarlierRelease(version: 1, phase: "federated", identityId: "id", expiration: 1_700_003_600))
        XCTAssertFalse(String(decoding: try short.storedBytes(session: "s"), as: UTF8.self).contains("versionFloor"))
    }

    /// A stored expiration outside what the wire accepts (after 1970, before the year 5138)
    /// fails that session's read: 1e19 seconds trapped the CLI's date rendering.
    func testAStoredExpirationNoCredentialsCanHaveIsRefused() throws {
        let good = try SessionRecord(phase: .federated, identityId: "id", provider: "google", credentials: credentials("s", "t", 1_700_000_000))
            .storedBytes(session: "s")
        let text = String(decoding: good, as: UTF8.self)
        XCTAssertTrue(text.contains("1700000000"), text)
        for implausible in ["1e19", "-5", "0", "100000000000"] {
            let bytes = Array(text.replacingOccurrences(of: "1700000000", with: implausible).utf8)
            XCTAssertThrowsError(try SessionRecord(stored: bytes, session: "s"), implausible) { error in
                let error = error as? FederationError
                XCTAssertEqual(error?.code, .storage, implausible)
                XCTAssertTrue(error?.message.contains("clear it") ?? false, "\(String(describing: error))")
            }
        }
    }

    /// An `InMemoryKeystore` keeps the stored bytes as they are, so spare capacity is heap
    /// every live session pays for (docs/performance.md §4): a buffer grown by doubling held
    /// 2 KiB for a 1.3 KB record.
    func testAStoredRecordCarriesLittleSpareCapacity() throws {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        let token = String((0..<1000).map { alphabet[($0 * 37) % alphabet.count] })  // 1000 chars, 16 of them "/"
        let record = SessionRecord(
            phase: .federated, identityId: "us-east-1:0f0e0d0c-0b0a-4909-8807-060504030201", provider: "graph.facebook.com",
            credentials: credentials("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", token, 1_795_000_000.125))
        let bytes = try record.storedBytes(session: "s")
        XCTAssertGreaterThan(bytes.count, 1200)
        XCTAssertLessThan(bytes.capacity, bytes.count + bytes.count / 8, "capacity \(bytes.capacity) for \(bytes.count) bytes")
        XCTAssertEqual(try SessionRecord(stored: bytes, session: "s"), record)
    }

    func testOtherShapesAreLeftToJSONDecoder() throws {
        let valid = #"{"version":1,"phase":"federated","identityId":"id","accessKeyId":"AK","secretAccessKey":"SK","sessionToken":"T","expiration":4102444800}"#
        XCTAssertNotNil(read(Array(valid.utf8)))
        let others = [
            #"{ "version":1,"phase":"federated"}"#,                           // whitespace
            #"{"version":1,"phase":"federated","extra":true}"#,               // unknown key
            #"{"version":1,"version":1,"phase":"federated"}"#,                // repeated key
            #"{"version":1,"phase":"federated","identityId":"\ud800"}"#,      // lone surrogate
            #"{"version":1.0,"phase":"federated"}"#,                          // non-integer version
            #"{"version":1,"phase":"federated","expiration":01}"#,            // not a JSON number
            #"{"version":1,"phase":"federated","expiration":1e999}"#,         // not finite
            #"{"version":1,"phase":"expired"}"#,                              // unknown phase
            #"{"phase":"federated"}"#,                                        // no version
            #"{"version":1,"phase":"federated"} "#,                           // trailing bytes
            #"{"version":1,"phase":"federated""#,                             // truncated
        ]
        for text in others {
            XCTAssertNil(read(Array(text.utf8)), text)
        }
        // Left to JSONDecoder, which reads what it can (and still decides what fails).
        let spaced = try SessionRecord(stored: Array(#"{ "version": 1, "phase": "terminated", "extra": 2 }"#.utf8), session: "s")
        XCTAssertEqual(spaced.phase, .terminated)
        let escaped = try XCTUnwrap(read(Array(#"{"version":1,"phase":"federated","identityId":"\u0041\ud83d\ude00"}"#.utf8)))
        XCTAssertEqual(escaped.identityId, "A😀")
        XCTAssertThrowsError(try SessionRecord(stored: Array(#"{"version":2,"phase":"federated"}"#.utf8), session: "s"))
        XCTAssertThrowsError(try SessionRecord(stored: Array(#"{"version":1,"phase":"expired"}"#.utf8), session: "s"))
        XCTAssertThrowsError(try SessionRecord(stored: [0xFF, 0xFE], session: "s"))
    }
}
