@testable import FederateCLI
import BrokerTestSupport
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
