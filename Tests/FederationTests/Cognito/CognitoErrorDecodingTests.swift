import BrokerTestSupport
@testable import Federation
import Foundation
import SecureStorage
import XCTest

/// Cognito Identity error responses → ``FederationError``.
final class CognitoErrorDecodingTests: XCTestCase {
    /// Every documented type: fixture, HTTP status, expected code.
    private let documented: [(type: String, status: Int, code: FederationError.Code)] = [
        ("NotAuthorized", 400, .notAuthorized),
        ("ResourceNotFound", 404, .resourceNotFound),
        ("ResourceConflict", 409, .resourceConflict),
        ("TooManyRequests", 429, .throttled),
        ("LimitExceeded", 400, .limitExceeded),
        ("InvalidParameter", 400, .invalidParameter),
        ("InvalidIdentityPoolConfiguration", 400, .invalidIdentityPoolConfiguration),
        ("ExternalService", 400, .externalService),
        ("InternalError", 500, .serviceUnavailable),
        ("DeveloperUserAlreadyRegistered", 400, .developerUserAlreadyRegistered),
    ]

    private func decode(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8], secrets: [String] = []) -> FederationError {
        CognitoErrorDecoder.decode(response: HTTPResponse(status: status, headers: headers, body: body), operation: "GetId", redacting: secrets)
    }

    func testEveryDocumentedTypeMapsToItsCode() throws {
        for (type, status, code) in documented {
            let body = try Fixtures.bytes("error.\(type)")
            let fixture = try Fixtures.object("error.\(type)")
            let error = decode(status: status, body: body)
            XCTAssertEqual(error.code, code, type)
            XCTAssertEqual(error.serviceErrorType, "\(type)Exception", type)
            XCTAssertEqual(error.serviceMessage, fixture["message"] as? String, type)
            XCTAssertEqual(error.httpStatus, status, type)
            XCTAssertEqual(error.operation, "GetId", type)
            XCTAssertFalse(error.message.isEmpty)
        }
    }

    func testEveryDocumentedTypeMapsToItsCodeThroughTheClient() async throws {
        for (type, status, code) in documented {
            let harness = try Harness(retry: .none)
            harness.fake.enqueue(.init(status: status, body: try Fixtures.bytes("error.\(type)")), for: .getId)
            let error = await assertThrows(FederationError.self, code: code) {
                try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "s")
            }
            XCTAssertEqual(error?.serviceErrorType, "\(type)Exception", type)
            XCTAssertEqual(error?.httpStatus, status, type)
            XCTAssertEqual(error?.operation, "GetId", type)
            XCTAssertEqual(harness.fake.calls.count, 1, type)
        }
    }

    /// The service's type and message may carry anything: no control or bidirectional
    /// formatting character of theirs reaches the error's texts (a terminal, a log line).
    func testControlCharactersInTheServicesWordsAreEscaped() {
        let error = decode(
            status: 400,
            headers: [("x-amzn-ErrorType", "NotAuthorizedException")],
            body: Array(#"{"__type":"NotAuthorizedException","message":"bad\u001b[31m token\nforged line\u202e\u0085"}"#.utf8))
        XCTAssertEqual(error.code, .notAuthorized)
        XCTAssertEqual(error.serviceMessage, "bad\\u{1B}[31m token\\u{A}forged line\\u{202E}\\u{85}")
        for text in [error.description, error.debugDescription, error.message] {
            XCTAssertFalse(text.unicodeScalars.contains(where: \.isControlOrBidirectionalFormat), text)
        }
    }

    func testTypeFromTheErrorTypeHeaderWithURISuffix() {
        let error = decode(
            status: 400,
            headers: [("x-amzn-ErrorType", "NotAuthorizedException:http://internal.amazon.com/coral/com.amazon.coral.service/")],
            body: Array(#"{"message":"Invalid login token."}"#.utf8))
        XCTAssertEqual(error.code, .notAuthorized)
        XCTAssertEqual(error.serviceErrorType, "NotAuthorizedException")
        XCTAssertEqual(error.serviceMessage, "Invalid login token.")
    }

    func testTypeFromTheErrorTypeHeaderWithNamespaceAndSuffix() {
        let error = decode(
            status: 400,
            headers: [("X-Amzn-Errortype", "com.amazonaws.cognito.identity#ResourceConflictException:http://internal.amazon.com/")],
            body: [])
        XCTAssertEqual(error.code, .resourceConflict)
        XCTAssertEqual(error.serviceErrorType, "ResourceConflictException")
    }

    func testTheHeaderWinsOverTheBody() {
        let error = decode(
            status: 400, headers: [("x-amzn-ErrorType", "LimitExceededException")],
            body: FakeCognito.errorBody(type: "NotAuthorizedException", message: "m"))
        XCTAssertEqual(error.code, .limitExceeded)
    }

    func testNamespacedBodyTypeAndCapitalisedMessage() throws {
        let error = decode(status: 400, body: try Fixtures.bytes("error.namespaced-capital-message"))
        XCTAssertEqual(error.code, .notAuthorized)
        XCTAssertEqual(error.serviceErrorType, "NotAuthorizedException")
        XCTAssertEqual(error.serviceMessage, "Logins don't match. Please include at least one valid login for this identity or identity pool.")
    }

    func testCapitalisedMessageThroughTheClient() async throws {
        let harness = try Harness(retry: .none)
        harness.fake.enqueue(.error("InvalidParameterException", message: "Capital M", messageKey: "Message"), for: .getId)
        let error = await assertThrows(FederationError.self, code: .invalidParameter) { try await harness.client.federate(token: TestJWT.valid(), provider: .google) }
        XCTAssertEqual(error?.serviceMessage, "Capital M")
    }

    func testTypeFromTheHeaderThroughTheClient() async throws {
        let harness = try Harness(retry: .none)
        harness.fake.enqueue(
            .init(
                status: 400, headers: [("x-amzn-ErrorType", "aws.cognito#ExternalServiceException:http://internal.amazon.com/")],
                body: Array(#"{"message":"provider down"}"#.utf8)),
            for: .getId)
        let error = await assertThrows(FederationError.self, code: .externalService) { try await harness.client.federate(token: TestJWT.valid(), provider: .google) }
        XCTAssertEqual(error?.serviceErrorType, "ExternalServiceException")
        XCTAssertEqual(error?.serviceMessage, "provider down")
    }

    func testUnknownTypeIsAServiceErrorCarryingTheRawType() {
        let error = decode(status: 400, body: FakeCognito.errorBody(type: "BrandNewException", message: "something new"))
        XCTAssertEqual(error.code, .serviceError)
        XCTAssertEqual(error.serviceErrorType, "BrandNewException")
        XCTAssertEqual(error.serviceMessage, "something new")
        XCTAssertEqual(error.httpStatus, 400)
    }

    /// A 429 whose type nobody knows (a front end's or proxy's rate limit) is throttling:
    /// retried as such, and the CLI's "try again" (5), not "rejected" (4).
    func testAnUnknownTypeWithStatus429IsThrottled() {
        let error = decode(status: 429, body: FakeCognito.errorBody(type: "RateLimitedByGateway", message: "slow down"))
        XCTAssertEqual(error.code, .throttled)
        XCTAssertEqual(error.serviceErrorType, "RateLimitedByGateway")
        XCTAssertEqual(decode(status: 503, body: FakeCognito.errorBody(type: "GatewayOverloaded", message: nil)).code, .serviceUnavailable)
    }

    func testUnknownTypeThroughTheClient() async throws {
        let harness = try Harness(retry: .none)
        harness.fake.enqueue(.error("com.example#FutureException", message: "later"), for: .getCredentialsForIdentity)
        let error = await assertThrows(FederationError.self, code: .serviceError) { try await harness.client.federate(token: TestJWT.valid(), provider: .google) }
        XCTAssertEqual(error?.serviceErrorType, "FutureException")
        XCTAssertEqual(error?.operation, "GetCredentialsForIdentity")
    }

    func testStatusDecidesWhenThereIsNoType() {
        let throttled = decode(status: 429, body: [])
        XCTAssertEqual(throttled.code, .throttled)
        XCTAssertNil(throttled.serviceErrorType)
        XCTAssertEqual(throttled.httpStatus, 429)
        XCTAssertEqual(decode(status: 503, body: Array("<html>Service Unavailable</html>".utf8)).code, .serviceUnavailable)
        XCTAssertEqual(decode(status: 502, body: []).httpStatus, 502)
        let plain = decode(status: 400, body: Array("not json".utf8))
        XCTAssertEqual(plain.code, .serviceError)
        XCTAssertNil(plain.serviceErrorType)
        XCTAssertNil(plain.serviceMessage)
    }

    func test429WithoutTypeThroughTheClientIsThrottled() async throws {
        let harness = try Harness(retry: .none)
        harness.fake.enqueue(.init(status: 429, body: []), for: .getId)
        let error = await assertThrows(FederationError.self, code: .throttled) { try await harness.client.federate(token: TestJWT.valid(), provider: .google) }
        XCTAssertEqual(error?.httpStatus, 429)
    }

    func testSDKThrottlingCodesAreThrottled() {
        for type in ["ThrottlingException", "Throttling", "RequestLimitExceeded"] {
            XCTAssertEqual(decode(status: 400, body: FakeCognito.errorBody(type: type, message: nil)).code, .throttled, type)
        }
    }

    func testSentSecretsAreScrubbedFromTheServiceMessage() {
        let error = decode(
            status: 400, body: FakeCognito.errorBody(type: "NotAuthorizedException", message: "Invalid login token: tok-SECRET-123 rejected"),
            secrets: ["tok-SECRET-123"])
        XCTAssertEqual(error.serviceMessage, "Invalid login token: <redacted> rejected")
    }

    func testLongServiceMessagesAreShortened() {
        let long = String(repeating: "x", count: 5000)
        let error = decode(status: 400, body: FakeCognito.errorBody(type: "InvalidParameterException", message: long))
        XCTAssertLessThanOrEqual(error.serviceMessage?.count ?? .max, CognitoErrorDecoder.maxMessageLength + 1)
        XCTAssertEqual(error.serviceMessage?.hasPrefix("xxxx"), true)
    }

    /// Bounded in Unicode scalars, not characters: one base character and 100,000 combining
    /// marks is a single `Character`, and would otherwise reach logs and the CLI's line whole.
    func testAServiceMessageOfCombiningMarksIsShortenedToo() {
        let zalgo = "e" + String(repeating: "\u{0301}", count: 100_000)
        let typeZalgo = "Invalid" + String(repeating: "\u{0301}", count: 100_000)
        let error = decode(status: 400, body: FakeCognito.errorBody(type: typeZalgo, message: zalgo))
        XCTAssertLessThanOrEqual(error.serviceMessage?.unicodeScalars.count ?? .max, CognitoErrorDecoder.maxMessageLength + 1)
        XCTAssertLessThanOrEqual(error.serviceErrorType?.unicodeScalars.count ?? .max, 128)
        XCTAssertLessThan(error.description.utf8.count, 4096, "the error's description carries the whole text")
    }

    func testNormalizedType() {
        XCTAssertEqual(CognitoErrorDecoder.normalizedType("aws.cognito#NotAuthorizedException:http://x/"), "NotAuthorizedException")
        XCTAssertEqual(CognitoErrorDecoder.normalizedType("NotAuthorizedException"), "NotAuthorizedException")
        XCTAssertEqual(CognitoErrorDecoder.normalizedType("  InternalErrorException "), "InternalErrorException")
        XCTAssertNil(CognitoErrorDecoder.normalizedType(""))
        XCTAssertNil(CognitoErrorDecoder.normalizedType("ns#:http://x"))
    }
}
