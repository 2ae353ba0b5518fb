@testable import Federation
import Foundation
import XCTest

/// `JSONObjectWriter` writes what `JSONEncoder` (default options) writes: the same bytes for
/// one field (escapes, numbers), the same object for several (whose key order `JSONEncoder`
/// does not fix), and the Cognito request bodies as `JSONEncoder` encodes the inputs.
final class JSONObjectWriterTests: XCTestCase {
    private struct OneString: Encodable { var v: String }
    private struct OneDouble: Encodable { var v: Double }

    private func written(_ body: (inout JSONObjectWriter) throws -> Void) rethrows -> String {
        var writer = JSONObjectWriter()
        try body(&writer)
        return String(decoding: writer.finish(), as: UTF8.self)
    }

    func testStringsAreEscapedAsJSONEncoderEscapesThem() throws {
        // Every ASCII byte, and the characters other encoders treat specially.
        var samples = (0..<128).map { String(UnicodeScalar(UInt8($0))) }
        samples += ["", "é", "😀", "\u{2028}\u{2029}", "</script>", "a\"b\\c/d", "\u{FEFF}x", "\u{10FFFF}"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            samples.append(String((0..<Int.random(in: 1...24, using: &generator)).map { _ in samples.randomElement(using: &generator)!.first ?? "a" }))
        }
        let encoder = JSONEncoder()
        for sample in samples {
            let expected = String(decoding: try encoder.encode(OneString(v: sample)), as: UTF8.self)
            XCTAssertEqual(written { $0.add("v", sample) }, expected, sample.debugDescription)
        }
    }

    func testNumbersAreWrittenAsJSONEncoderWritesThem() throws {
        let encoder = JSONEncoder()
        for value in [0, -0.0, 1, 3, 0.1, 1e-7, 1e16, 1.2345678901234568e+17, 1_795_000_000, 1_795_000_000.5, 4_102_444_800, -12.25, .greatestFiniteMagnitude, .leastNonzeroMagnitude] {
            let expected = String(decoding: try encoder.encode(OneDouble(v: value)), as: UTF8.self)
            XCTAssertEqual(try written { try $0.add("v", value) }, expected, "\(value)")
        }
        XCTAssertEqual(written { $0.add("n", -42) }, #"{"n":-42}"#)
        for value in [Double.nan, .infinity, -.infinity] {
            var writer = JSONObjectWriter()
            XCTAssertThrowsError(try writer.add("v", value), "\(value)")
        }
        XCTAssertEqual(written { $0.add("absent", nil as String?); $0.add("none", nil as [String: String]?) }, "{}")
    }

    func testRequestBodiesAreTheObjectsJSONEncoderWrites() throws {
        let logins = ["accounts.google.com": "eyJhbGciOi.x/y", "graph.facebook.com": "EAAG\"q\\", "cognito-identity.amazonaws.com": "t\n"]
        let inputs: [any CognitoRequestBody] = [
            GetIdInput(IdentityPoolId: "us-east-1:1", AccountId: nil, Logins: logins),
            GetIdInput(IdentityPoolId: "us-east-1:1", AccountId: "123456789012", Logins: nil),
            GetCredentialsForIdentityInput(IdentityId: "us-east-1:2", Logins: logins, CustomRoleArn: "arn:aws:iam::1:role/r"),
            GetCredentialsForIdentityInput(IdentityId: "us-east-1:2", Logins: nil, CustomRoleArn: nil),
            GetOpenIdTokenInput(IdentityId: "us-east-1:3", Logins: [:]),
            GetOpenIdTokenForDeveloperIdentityInput(IdentityPoolId: "p", IdentityId: nil, Logins: ["login.example": "alice/1"], TokenDuration: 900),
            GetOpenIdTokenForDeveloperIdentityInput(IdentityPoolId: "p", IdentityId: "id", Logins: [:], TokenDuration: nil),
        ]
        for input in inputs {
            let expected = try JSONSerialization.jsonObject(with: JSONEncoder().encode(input)) as? NSDictionary
            let body = input.jsonBody
            let actual = try JSONSerialization.jsonObject(with: Data(body)) as? NSDictionary
            XCTAssertEqual(actual, expected, String(decoding: body, as: UTF8.self))
        }
    }
}
