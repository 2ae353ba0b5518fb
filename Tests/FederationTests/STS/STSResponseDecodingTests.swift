import BrokerTestSupport
@testable import Federation
import Foundation
import SecureStorage
import XCTest

/// STS's XML: the success shape, the error shape, and bodies that must fail as typed
/// `invalidResponse` errors naming an element, never a value.
final class STSResponseDecodingTests: XCTestCase {
    private let redactor = SecretRedactor(secrets: [FakeCognito.openIdToken])

    private func decode(_ text: String) throws(FederationError) -> AssumedRoleOutput {
        try STSResponseDecoder.assumedRole(from: Array(text.utf8), redactor: redactor)
    }

    private func expectInvalid(_ text: String, mentioning expected: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            _ = try decode(text)
            XCTFail("decoded \(text.prefix(60))", file: file, line: line)
        } catch {
            XCTAssertEqual(error.code, .invalidResponse, file: file, line: line)
            XCTAssertEqual(error.operation, "AssumeRoleWithWebIdentity", file: file, line: line)
            XCTAssertTrue(error.message.contains(expected), "\(error.message)", file: file, line: line)
            XCTAssertNil(leakedRun(in: error.message, of: [FakeCognito.stsSecretKey, FakeCognito.stsSessionToken]), error.message, file: file, line: line)
        }
    }

    func testSuccessFixtureDecodes() throws {
        let body = try Fixtures.text("AssumeRoleWithWebIdentity.success.xml")
        let output = try decode(body)
        XCTAssertEqual(output.credentials.accessKeyId, "ASIAIOSFODNN7EXAMPLE")
        XCTAssertEqual(output.credentials.secretAccessKey, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY")
        XCTAssertTrue(output.credentials.sessionToken.hasPrefix("AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE"))
        XCTAssertEqual(output.credentials.expiration, Date(timeIntervalSince1970: 1_414_191_623))  // 2014-10-24T23:00:23Z
        XCTAssertEqual(output.assumedRoleArn, "arn:aws:sts::123456789012:assumed-role/FederatedWebIdentityRole/app1")
        XCTAssertEqual(output.subject, "us-east-1:aaaaaaaa-0000-0000-0000-000000000001")
    }

    func testMotoShapeWithoutSubjectAndWithMicroseconds() throws {
        let output = try decode(FakeCognito.assumedRoleBody(subject: nil, expirationLiteral: "2026-11-22T18:37:24.710928Z"))
        XCTAssertNil(output.subject)
        XCTAssertEqual(output.credentials.expiration.timeIntervalSince1970, 1_795_372_644.710928, accuracy: 0.0001)
    }

    func testISO8601Variants() {
        XCTAssertEqual(ISO8601Timestamp.parse("1970-01-01T00:00:00Z"), Date(timeIntervalSince1970: 0))
        XCTAssertEqual(ISO8601Timestamp.parse("2000-02-29T12:00:00Z"), Date(timeIntervalSince1970: 951_825_600))
        XCTAssertEqual(ISO8601Timestamp.parse("2000-02-29T14:00:00+02:00"), Date(timeIntervalSince1970: 951_825_600))
        XCTAssertEqual(ISO8601Timestamp.parse("2000-02-29T07:00:00-05:00"), Date(timeIntervalSince1970: 951_825_600))
        XCTAssertEqual(ISO8601Timestamp.parse("2100-03-01T00:00:00Z"), Date(timeIntervalSince1970: 4_107_542_400))
        XCTAssertNil(ISO8601Timestamp.parse("2100-02-29T00:00:00Z"), "2100 is no leap year")
        XCTAssertEqual(ISO8601Timestamp.parse("2000-02-29T12:00:00.5Z")?.timeIntervalSince1970, 951_825_600.5)
        for bad in ["", "2000-02-30T00:00:00Z", "2001-02-29T00:00:00Z", "2000-01-01 00:00:00Z", "2000-01-01T00:00:00", "2000-01-01T24:00:00Z",
                    "2000-01-01T00:00:00.Z", "2000-01-01T00:00:00Zjunk", "1700000000", "２０００-01-01T00:00:00Z"] {
            XCTAssertNil(ISO8601Timestamp.parse(bad), bad)
        }
    }

    func testMissingElementsAreNamed() {
        let full = FakeCognito.assumedRoleBody(expirationLiteral: "2026-01-01T00:00:00Z")
        for element in ["SecretAccessKey", "SessionToken", "AccessKeyId", "Expiration"] {
            let without = full.replacingOccurrences(of: "<\(element)>", with: "<X\(element)>").replacingOccurrences(of: "</\(element)>", with: "</X\(element)>")
            expectInvalid(without, mentioning: "AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/Credentials/\(element)")
        }
        expectInvalid(full.replacingOccurrences(of: "Credentials>", with: "Creds>"), mentioning: "AssumeRoleWithWebIdentityResult/Credentials'")
        expectInvalid("<Other/>", mentioning: "'Other' where 'AssumeRoleWithWebIdentityResponse' belongs")
        expectInvalid(full.replacingOccurrences(of: "2026-01-01T00:00:00Z", with: "tomorrow"), mentioning: "Credentials/Expiration' (not an ISO 8601")
    }

    func testMalformedTruncatedEmptyAndDTDBodies() {
        let full = FakeCognito.assumedRoleBody(expirationLiteral: "2026-01-01T00:00:00Z")
        let cut = String(full[..<full.range(of: "<Expiration>")!.lowerBound]) + "<Expiration>2026-01"
        expectInvalid(cut, mentioning: "truncated XML inside 'AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/Credentials/Expiration'")
        expectInvalid(String(full.prefix(30)), mentioning: "truncated XML")
        expectInvalid(String(full[..<full.range(of: "<Expiration>")!.lowerBound]) + "<Expira", mentioning: "truncated XML inside")
        expectInvalid(String(full[..<full.range(of: "</Credentials>")!.lowerBound]) + "</Creden", mentioning: "truncated XML inside")
        expectInvalid("<AssumeRoleWithWebIdentityResponse><Oops></AssumeRoleWithWebIdentityResponse>", mentioning: "malformed XML at 'AssumeRoleWithWebIdentityResponse/Oops'")
        expectInvalid("<AssumeRoleWithWebIdentityResponse><A></B></AssumeRoleWithWebIdentityResponse>", mentioning: "malformed XML")
        expectInvalid("{\"not\":\"xml\"}", mentioning: "malformed XML")
        expectInvalid(full + "<Second/>", mentioning: "malformed XML")
        expectInvalid("   \n", mentioning: "an empty body")
        expectInvalid(#"<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa">]><AssumeRoleWithWebIdentityResponse>&a;</AssumeRoleWithWebIdentityResponse>"#,
                      mentioning: "document type declaration")
        let deep = String(repeating: "<a>", count: 40) + String(repeating: "</a>", count: 40)
        expectInvalid(deep, mentioning: "nested too deep")
    }

    func testAValueNeverAppearsInAnError() {
        // A secret-bearing element name cut short is named; its value never is.
        let sessionToken = "TOPSECRETSESSIONTOKENVALUE0123456789"
        let body = FakeCognito.assumedRoleBody(sessionToken: sessionToken, expirationLiteral: "not-a-date")
        do {
            _ = try decode(body)
            XCTFail("decoded")
        } catch {
            XCTAssertNil(leakedRun(in: error.description, of: [sessionToken, "TOPSECRET", FakeCognito.stsSecretKey]), error.description)
            XCTAssertFalse(error.description.contains("not-a-date"))
        }
    }

    /// libxml2 reports warnings through its error callback too; a warning does not make a
    /// well-formed answer unreadable (emulators and proxies send a relative namespace, XML 1.1).
    func testWarningsDoNotFailAWellFormedAnswer() throws {
        let success = try Fixtures.text("AssumeRoleWithWebIdentity.success.xml")
        guard let namespace = success.range(of: #"xmlns="[^"]*""#, options: .regularExpression) else { return XCTFail("fixture has no namespace") }
        for variant in [
            success.replacingCharacters(in: namespace, with: #"xmlns="sts""#),
            #"<?xml version="1.1"?>"# + "\n" + success.replacingOccurrences(of: #"<?xml version="1.0"?>"#, with: ""),
        ] {
            let output = try decode(variant)
            XCTAssertEqual(output.credentials.accessKeyId, "ASIAIOSFODNN7EXAMPLE")
        }
        let relative = FakeCognito.stsErrorBody(code: "AccessDenied", message: "no").replacingOccurrences(
            of: #"xmlns="https://sts.amazonaws.com/doc/2011-06-15/""#, with: #"xmlns="sts""#)
        XCTAssertTrue(relative.contains(#"xmlns="sts""#), relative)
        XCTAssertEqual(STSResponseDecoder.errorFields(from: Array(relative.utf8))?.code, "AccessDenied")
    }

    func testErrorResponseFields() {
        let fields = STSResponseDecoder.errorFields(from: Array(FakeCognito.stsErrorBody(code: "AccessDenied", message: "a & b").utf8))
        XCTAssertEqual(fields?.code, "AccessDenied")
        XCTAssertEqual(fields?.message, "a & b")
        XCTAssertNil(STSResponseDecoder.errorFields(from: Array("<html>Bad Gateway</html>".utf8)))
    }

    func testErrorDecoderFallsBackToTheStatus() {
        let gateway = STSErrorDecoder.decode(response: HTTPResponse(status: 502, body: Array("<html/>".utf8)), operation: "AssumeRoleWithWebIdentity", redacting: [])
        XCTAssertEqual(gateway.code, .serviceUnavailable)
        XCTAssertNil(gateway.serviceErrorType)
        let throttled = STSErrorDecoder.decode(response: HTTPResponse(status: 429, body: []), operation: "AssumeRoleWithWebIdentity", redacting: [])
        XCTAssertEqual(throttled.code, .throttled)
        let echoed = STSErrorDecoder.decode(
            response: HTTPResponse(status: 400, body: Array(FakeCognito.stsErrorBody(code: "InvalidIdentityToken", message: "bad \(FakeCognito.openIdToken)").utf8)),
            operation: "AssumeRoleWithWebIdentity", redacting: [FakeCognito.openIdToken])
        XCTAssertEqual(echoed.code, .notAuthorized)
        XCTAssertEqual(echoed.serviceMessage, "bad <redacted>")
    }
}
