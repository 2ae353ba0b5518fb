@testable import FederateCLI
import BrokerTestSupport
import CredentialServer
import PostgresKeystore
import XCTest

/// What the CLI registers as secrets from its own arguments before parsing: token-shaped
/// arguments, and a URL's password. Nothing else, or errors would hide what they are about.
final class SecretArgumentTests: XCTestCase {
    func testTokensLookLikeTokens() {
        XCTAssertTrue(Federate.looksLikeAToken(TestJWT.valid(sub: "alice")))
        XCTAssertTrue(Federate.looksLikeAToken("eyJhbGciOiJSU0EtT0FFUCJ9.a2V5.aXY.Y2lwaGVydGV4dA.dGFn"), "a JWE")
        // A SAML assertion: standard base64, slashes and all.
        XCTAssertTrue(Federate.looksLikeAToken(String(repeating: "PHNhbWxwOlJl/c3Bvbn+Nl", count: 15) + "=="))
        // Other providers' access tokens: not JWTs, and not base64.
        XCTAssertTrue(Federate.looksLikeAToken("EAA" + String(repeating: "ZCBqZBZAZDZD7xY", count: 12)), "Facebook")
        XCTAssertTrue(Federate.looksLikeAToken("ya29.a0AfB_" + String(repeating: "byC-wk9Qx2", count: 14)), "a Google access token")
        XCTAssertTrue(Federate.looksLikeAToken("Atza|IwEBIJ" + String(repeating: "k3Wf8Rz", count: 6)), "Amazon")
        XCTAssertTrue(Federate.looksLikeAToken("1234567890-AbCdEfGhIjKlMnOp;QrStUvWxYz0123456789abcd"), "Twitter's token;secret")
    }

    func testWhatTheCLINamesDoesNotLookLikeATokens() {
        for text in [
            "", "alice", "alice.smith.prod-eu-west-1-runner-x", "login.example-company.my-application",
            "cognito-identity.us-east-1.amazonaws.com", "us-east-1:0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
            "arn:aws:iam::123456789012:role/federated-users", "https://cognito-identity.us-east-1.amazonaws.com/",
            "/" + String(repeating: "a", count: 300), "./" + String(repeating: "b", count: 300),
            String(repeating: "c", count: 128), "alice@example.com:" + String(repeating: "d", count: 110),
            "/var/lib/" + String(repeating: "e", count: 200),
        ] {
            XCTAssertFalse(Federate.looksLikeAToken(text), text)
        }
    }

    func testTheURLPasswordIsFoundInTheUserInformationOnly() {
        func password(_ url: String) -> String? {
            let bytes = Array(url.utf8)
            return URLPassword.range(in: bytes).map { String(decoding: bytes[$0], as: UTF8.self) }
        }
        XCTAssertEqual(password("postgres://alice:s3cr%40t@db:5432/x?sslmode=require"), "s3cr%40t")
        XCTAssertEqual(password("postgresql://alice:p:w@[::1]/x"), "p:w")
        // The keystore's URL parser takes an unescaped '#' as part of the password: so must this.
        XCTAssertEqual(password("postgres://alice:Pa#ss-w0rd@db/x"), "Pa#ss-w0rd")
        XCTAssertNil(password("postgres://alice@db/x"))
        XCTAssertNil(password("postgres://alice:@db/x"))
        XCTAssertNil(password("postgres://db/x?user=a@b:c"), "past the authority")
        XCTAssertNil(password("/var/lib/keystore"))
    }

    /// `federate` finds a URL's password on bytes before anything is parsed (it links no
    /// PostgreSQL code), and the keystore parses the URL itself: wherever the two disagreed, a
    /// password could reach a terminal unregistered. Across URLs built from the characters
    /// that delimit them, whenever the keystore reads a password, `URLPassword` registers
    /// exactly that text (before percent-decoding).
    func testTheRegisteredPasswordIsTheOneTheKeystoreReads() throws {
        var random = SplitMix64(seed: 0x1D_B20C)
        // Combining marks and a joiner merge with the delimiter before them into one Character,
        // which a Character-based parser would not split at.
        let alphabet: [String] = ["a", "b", "1", ":", "@", "/", "?", "#", "=", "&", "%40", "%3A", "%2F", "%", "[", "]", "é", "\u{301}", "\u{200D}"]
        func part(_ maximum: Int) -> String {
            (0..<Int.random(in: 0...maximum, using: &random)).map { _ in alphabet.randomElement(using: &random)! }.joined()
        }
        var withPassword = 0
        for _ in 0..<20_000 {
            var url = Bool.random(using: &random) ? "postgres://" : "postgresql://"
            url += "u" + part(3)
            if Bool.random(using: &random) { url += ":" + part(8) }
            url += "@" + (Bool.random(using: &random) ? "db" : "[::1]") + part(2)
            if Bool.random(using: &random) { url += ":" + String(Int.random(in: 1...65535, using: &random)) }
            if Bool.random(using: &random) { url += "/" + part(4) }
            if Bool.random(using: &random) { url += "?sslmode=" + part(3) }
            guard let configuration = try? PostgresKeystore.Configuration(url: url) else { continue }
            let bytes = Array(url.utf8)
            let registered = URLPassword.range(in: bytes).flatMap { Self.percentDecoded(bytes[$0]) }
            let read = configuration.password.flatMap { $0.isEmpty ? nil : $0 }
            XCTAssertEqual(registered, read, "for \(url)")
            if read != nil { withPassword += 1 }
        }
        XCTAssertGreaterThan(withPassword, 500, "the URLs exercise passwords")
    }

    private static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> String? {
        var decoded: [UInt8] = []
        var rest = bytes[...]
        while let byte = rest.popFirst() {
            if byte == UInt8(ascii: "%"), rest.count >= 2,
               let high = Character(Unicode.Scalar(rest[rest.startIndex])).hexDigitValue,
               let low = Character(Unicode.Scalar(rest[rest.startIndex + 1])).hexDigitValue {
                decoded.append(UInt8(high << 4 | low))
                rest = rest.dropFirst(2)
            } else {
                decoded.append(byte)
            }
        }
        return String(validating: decoded, as: UTF8.self)
    }

    /// `federate` (which links no credential server) names the variables it reads; what
    /// `exec` and library users withhold from a child is `CredentialEndpoint`'s list. A name
    /// renamed on one side only would reach the child.
    func testTheVariablesTheCLIReadsAreTheOnesAChildIsDenied() {
        XCTAssertEqual(KeystoreAccess.keystoreVariable, CredentialEndpoint.keystoreLocationVariable)
        let withheld = Set(CredentialEndpoint.keystoreVariables)
        for name in KeySelection.secretVariables + [KeySelection.keyFileVariable, KeySelection.otherKeyFileVariable] {
            XCTAssertTrue(withheld.contains(name), "\(name) is read by the CLI but not withheld from a child")
        }
    }

    /// libpq's keyword form holds a password: refused rather than taken for a directory.
    func testConnectionStringsAreToldFromDirectories() {
        for value in ["host=db password=x", "dbname = x", "  user=alice", "PASSWORD=x", "sslmode=require host=db"] {
            XCTAssertTrue(KeystoreLocation.looksLikeAConnectionString(value), value)
        }
        for value in ["./host=db", "/var/lib/broker/keystore", "keystore-user=alice", "my keystore", "data/host=x", "hosts=x"] {
            XCTAssertFalse(KeystoreLocation.looksLikeAConnectionString(value), value)
        }
    }
}
