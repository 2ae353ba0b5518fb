import BrokerTestSupport
@testable import Federation
import Foundation
import XCTest

/// SigV4 against AWS's published `get-vanilla` vector and botocore's signer for
/// the requests IdentityBroker sends (computed with botocore 1.43 for these inputs).
final class SigV4SignerTests: XCTestCase {
    private let credentials = SigningCredentials(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    private let date = Date(timeIntervalSince1970: 1_440_938_160)  // 2015-08-30T12:36:00Z
    private let body = Array(#"{"IdentityPoolId":"us-east-1:abc","Logins":{"login.mycompany":"user-42"}}"#.utf8)

    private func cognitoRequest(_ url: String) -> HTTPRequest {
        HTTPRequest(
            method: "POST", url: url,
            headers: [
                ("Content-Type", "application/x-amz-json-1.1"),
                ("X-Amz-Target", "AWSCognitoIdentityService.GetOpenIdTokenForDeveloperIdentity"),
            ],
            body: body)
    }

    func testPublishedGetVanillaVector() throws {
        var request = HTTPRequest(method: "GET", url: "https://example.amazonaws.com/")
        try SigV4Signer(credentials: credentials, region: "us-east-1", service: "service").sign(&request, at: date)
        XCTAssertEqual(request.header("X-Amz-Date"), "20150830T123600Z")
        XCTAssertEqual(
            request.header("Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        )
    }

    /// Signs a Cognito request to `url` for us-east-1 and returns it.
    private func signedCognitoRequest(_ url: String, sessionToken: String? = nil) throws -> HTTPRequest {
        var signing = credentials
        signing.sessionToken = sessionToken
        var request = cognitoRequest(url)
        try SigV4Signer(credentials: signing, region: "us-east-1", service: "cognito-identity").sign(&request, at: date)
        return request
    }

    private let cognitoScope = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/cognito-identity/aws4_request"

    func testCognitoRequestMatchesBotocore() throws {
        let request = try signedCognitoRequest("https://cognito-identity.us-east-1.amazonaws.com/")
        XCTAssertEqual(request.header("Host"), "cognito-identity.us-east-1.amazonaws.com")
        XCTAssertEqual(
            request.header("Authorization"),
            "\(cognitoScope), SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=1e5ec308743934dcbd2355131c50cb41180d3ec8d3a26e600f457849da3212c3")
    }

    func testSessionTokenIsSentAndSigned() throws {
        let request = try signedCognitoRequest("https://cognito-identity.us-east-1.amazonaws.com/", sessionToken: "SESSIONTOKEN")
        XCTAssertEqual(request.header("X-Amz-Security-Token"), "SESSIONTOKEN")
        XCTAssertEqual(
            request.header("Authorization"),
            "\(cognitoScope), SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, Signature=6336fc7826aa6f7928757d8905dc13e70718727ee1c84e07c52339df24c87afe")
    }

    func testHostKeepsANonDefaultPort() throws {
        let request = try signedCognitoRequest("http://127.0.0.1:5000/")
        XCTAssertEqual(request.header("Host"), "127.0.0.1:5000")
        XCTAssertEqual(
            request.header("Authorization"),
            "\(cognitoScope), SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=8a4777542a2082130a9dd8bcde801b85800fc67b1e13bc30941522744d078013")
    }

    func testTimestampsAcrossTheCalendar() {
        XCTAssertEqual(SigV4Signer.timestamp(Date(timeIntervalSince1970: 1_709_251_199)), "20240229T235959Z")
        XCTAssertEqual(SigV4Signer.timestamp(Date(timeIntervalSince1970: 946_598_401)), "19991231T000001Z")
        XCTAssertEqual(SigV4Signer.timestamp(Date(timeIntervalSince1970: 0)), "19700101T000000Z")
    }

    func testSigningCredentialsNeverPrintTheirSecrets() {
        let signing = SigningCredentials(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "SECRET-KEY-123", sessionToken: "TOKEN-456")
        var dumped = ""
        dump(signing, to: &dumped)
        for text in [signing.description, signing.debugDescription, "\(signing)", dumped] {
            XCTAssertFalse(text.contains("SECRET-KEY-123"), text)
            XCTAssertFalse(text.contains("TOKEN-456"), text)
            XCTAssertTrue(text.contains("AKIDEXAMPLE"), text)
        }
    }
}

/// The backend half of the developer flow, through libcurl.
final class DeveloperIdentityIssuerTests: XCTestCase {
    func testIssuerSignsAndReturnsTheToken() async throws {
        let recorded = LockedRequests()
        let server = try LoopbackHTTPServer { request in
            recorded.append(request)
            return .json(status: 200, #"{"IdentityId":"us-east-1:0000aaaa-1111-2222-3333-444455556666","Token":"eyJraWQiOi.minted.token"}"#)
        }
        defer { server.stop() }
        let issuer = try Self.issuer(at: server)
        let minted = try await issuer.openIdToken(forUser: "user-42", tokenDuration: .seconds(600))
        XCTAssertEqual(minted.identityId, "us-east-1:0000aaaa-1111-2222-3333-444455556666")
        XCTAssertEqual(minted.token, "eyJraWQiOi.minted.token")
        XCTAssertFalse("\(minted)".contains("minted.token"))

        let request = try XCTUnwrap(recorded.all.first)
        XCTAssertEqual(request.header("X-Amz-Target"), "AWSCognitoIdentityService.GetOpenIdTokenForDeveloperIdentity")
        let authorization = try XCTUnwrap(request.header("Authorization"))
        XCTAssertTrue(authorization.hasPrefix("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), authorization)
        XCTAssertTrue(authorization.contains("/us-east-1/cognito-identity/aws4_request"), authorization)
        XCTAssertFalse(authorization.contains("SECRET-KEY-123"))
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
        XCTAssertEqual(json["Logins"] as? [String: String], ["login.mycompany": "user-42"])
        XCTAssertEqual(json["TokenDuration"] as? Int, 600)
    }

    /// A signature refused for this host's clock (AWS allows five minutes) is signed again
    /// by the service's clock, taken from the refusal's `Date`, and later requests keep it,
    /// as the AWS SDKs do; a refusal whose `Date` agrees with the host's is not retried.
    func testASignatureRefusedForTheHostsClockIsSignedAgainByTheServicesClock() async throws {
        let recorded = LockedRequests()
        let ahead = Date().addingTimeInterval(600)
        let refusedOnce = LockedBox(false)
        let server = try LoopbackHTTPServer { request in
            recorded.append(request)
            if request.header("X-Amz-Target")?.hasSuffix("GetOpenIdTokenForDeveloperIdentity") == true, !refusedOnce.withLock({ refused in defer { refused = true }; return refused }) {
                return .respond(
                    status: 400,
                    headers: [("Content-Type", "application/x-amz-json-1.1"), ("Date", Self.httpDate(ahead))],
                    text: #"{"__type":"InvalidSignatureException","message":"Signature expired: is now earlier than (now - 5 min.)"}"#)
            }
            return .json(status: 200, #"{"IdentityId":"us-east-1:0000aaaa-1111-2222-3333-444455556666","Token":"eyJraWQiOi.minted.token"}"#)
        }
        defer { server.stop() }
        let issuer = try Self.issuer(at: server)
        _ = try await issuer.openIdToken(forUser: "user-42")
        _ = try await issuer.openIdToken(forUser: "user-43")
        let dates = try recorded.all.map { try XCTUnwrap(Self.formatter("yyyyMMdd'T'HHmmss'Z'").date(from: $0.header("X-Amz-Date") ?? "")) }
        XCTAssertEqual(dates.count, 3, "refused, signed again, then the next request")
        XCTAssertLessThan(abs(dates[0].timeIntervalSinceNow), 60, "the first request is signed by the host's clock")
        for date in dates.dropFirst() {
            XCTAssertLessThan(abs(date.timeIntervalSince(ahead)), 60, "later requests are signed by the service's clock: \(dates)")
        }

        // A refusal of the same type whose Date agrees with the host's is about something else.
        let other = try LoopbackHTTPServer { _ in
            .respond(
                status: 400,
                headers: [("Content-Type", "application/x-amz-json-1.1"), ("Date", Self.httpDate(Date()))],
                text: #"{"__type":"InvalidSignatureException","message":"The request signature we calculated does not match"}"#)
        }
        defer { other.stop() }
        let refused = try Self.issuer(at: other)
        do {
            _ = try await refused.openIdToken(forUser: "user-44")
            XCTFail("a refused signature succeeded")
        } catch {
            XCTAssertEqual(error.serviceErrorType, "InvalidSignatureException")
        }
        XCTAssertEqual(other.requestCount, 1, "retried though the clocks agree")
    }

    /// Only refusals about the signature's time teach the service's clock (Cognito's
    /// `InvalidSignatureException` also reports wrong signatures); and one whose `Date`
    /// agrees with a signature made by a learned clock shows the lesson was wrong (a proxy's
    /// clock), so the host's clock is trusted again.
    func testTheServicesClockIsLearnedOnlyFromTimeRefusalsAndForgottenWhenItAgrees() {
        let skew = ClockSkew()
        let local = Date(timeIntervalSince1970: 1_800_000_000)
        let ahead = local.addingTimeInterval(600)
        let aheadDate = [(name: "Date", value: Self.httpDate(ahead))]
        XCTAssertFalse(skew.learn(
            errorType: "InvalidSignatureException", message: "The request signature we calculated does not match the signature you provided",
            headers: aheadDate, signedAt: local, local: local))
        XCTAssertFalse(skew.learn(errorType: "SignatureDoesNotMatch", message: nil, headers: aheadDate, signedAt: local, local: local))
        XCTAssertEqual(skew.now(local: local), local, "a wrong signature taught nothing")
        XCTAssertTrue(skew.learn(
            errorType: "InvalidSignatureException", message: "Signature expired: 20270115T080000Z is now earlier than 20270115T080500Z",
            headers: aheadDate, signedAt: local, local: local))
        XCTAssertEqual(skew.now(local: local), ahead)
        XCTAssertTrue(skew.learn(errorType: "RequestExpired", message: nil, headers: aheadDate, signedAt: ahead, local: local))
        XCTAssertEqual(skew.now(local: local), local, "the host's clock is trusted again")
        XCTAssertFalse(skew.learn(
            errorType: "RequestExpired", message: nil, headers: [(name: "Date", value: Self.httpDate(local))], signedAt: local, local: local),
            "nothing left to unlearn")
    }

    /// An issuer for `login.mycompany` that calls `server`, signing as `AKIDEXAMPLE`.
    private static func issuer(at server: LoopbackHTTPServer) throws -> DeveloperIdentityIssuer {
        try DeveloperIdentityIssuer(
            configuration: FederationConfiguration(identityPoolId: "us-east-1:11111111-2222-3333-4444-555555555555", endpoint: server.url("/")),
            developerProviderName: "login.mycompany",
            credentials: SigningCredentials(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "SECRET-KEY-123"),
            transport: CurlTransport.shared, environment: [:], logger: nil)
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
    private static func httpDate(_ date: Date) -> String {
        formatter("EEE, dd MMM yyyy HH:mm:ss 'GMT'").string(from: date)
    }

    private static func formatter(_ format: String) -> DateFormatter {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = format
        return formatter
    }

    func testIssuerAgainstMotoFeedsTheClient() async throws {
        let moto = try MotoServer.start()
        defer { moto.stop() }
        let pool = try await moto.createIdentityPool(developerProviderName: "login.mycompany")
        let configuration = FederationConfiguration(identityPoolId: pool, endpoint: moto.endpoint, expiryMargin: .seconds(5))
        let issuer = try DeveloperIdentityIssuer(
            configuration: configuration, developerProviderName: "login.mycompany",
            credentials: SigningCredentials(accessKeyId: "testing", secretAccessKey: "testing"))
        let minted = try await issuer.openIdToken(forUser: "user-7")
        let client = try FederationClient(configuration: configuration)
        let result = try await client.federate(
            token: minted.token, provider: .developer,
            options: FederationOptions(developerProvidedIdentityId: minted.identityId), session: "user-7")
        XCTAssertEqual(result.identityId, minted.identityId)
    }
}

final class LockedRequests: @unchecked Sendable {
    private let lock = NSLock()
    private var requests: [RecordedRequest] = []
    func append(_ request: RecordedRequest) { lock.withLock { requests.append(request) } }
    var all: [RecordedRequest] { lock.withLock { requests } }
}
