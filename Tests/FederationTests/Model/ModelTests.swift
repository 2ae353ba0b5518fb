@testable import Federation
import Foundation
import XCTest

/// The public value types.
final class ModelTests: XCTestCase {
    private let credentials = AWSCredentials(
        accessKeyId: "ASIAMODELTEST", secretAccessKey: "model-secret-key/abc", sessionToken: "model-session-token==",
        expiration: Date(timeIntervalSince1970: 1_700_003_600))

    // MARK: AWSCredentials

    func testCredentialsDescriptionsRedactTheSecrets() {
        var dumped = ""
        dump(credentials, to: &dumped)
        var dumpedArray = ""
        dump([credentials], to: &dumpedArray)
        for text in [
            credentials.description, credentials.debugDescription, "\(credentials)", String(reflecting: credentials),
            String(describing: [credentials]), String(describing: Optional(credentials)), dumped, dumpedArray,
        ] {
            XCTAssertFalse(text.contains("model-secret-key"), text)
            XCTAssertFalse(text.contains("model-session-token"), text)
        }
        XCTAssertTrue(credentials.description.contains("ASIAMODELTEST"), "the access key ID is shown")
        XCTAssertTrue(credentials.description.contains("<redacted>"))
        XCTAssertTrue(dumped.contains("ASIAMODELTEST"))
    }

    func testCredentialsExpiryUsesTheMargin() {
        let expiration = credentials.expiration
        XCTAssertFalse(credentials.isExpired(at: expiration.addingTimeInterval(-121)))
        XCTAssertTrue(credentials.isExpired(at: expiration.addingTimeInterval(-120)))
        XCTAssertTrue(credentials.isExpired(at: expiration.addingTimeInterval(-119)))
        XCTAssertFalse(credentials.isExpired(at: expiration.addingTimeInterval(-11), margin: .seconds(10)))
        XCTAssertTrue(credentials.isExpired(at: expiration.addingTimeInterval(-9), margin: .seconds(10)))
        XCTAssertTrue(credentials.isExpired(at: expiration, margin: .zero))
        XCTAssertTrue(credentials.isExpired(at: expiration.addingTimeInterval(-0.4), margin: .milliseconds(500)))
    }

    func testCredentialsRoundTripThroughCodableWithTheirSecrets() throws {
        // Persistence needs the secrets; only printing hides them.
        let decoded = try JSONDecoder().decode(AWSCredentials.self, from: JSONEncoder().encode(credentials))
        XCTAssertEqual(decoded, credentials)
    }

    // MARK: SessionSnapshot, FederationResult

    func testSnapshotDescriptionShowsStateAndRedactsCredentials() {
        let snapshot = SessionSnapshot(
            name: "alice", state: .federated, identityId: "us-east-1:id", provider: .google, credentials: credentials,
            expiration: credentials.expiration)
        let text = snapshot.description
        XCTAssertTrue(text.contains("alice"))
        XCTAssertTrue(text.contains("federated"))
        XCTAssertTrue(text.contains("us-east-1:id"))
        XCTAssertTrue(text.contains("google"))
        var dumped = ""
        dump(snapshot, to: &dumped)
        for text in [text, String(reflecting: snapshot), dumped] {
            XCTAssertFalse(text.contains("model-secret-key"), text)
            XCTAssertFalse(text.contains("model-session-token"), text)
        }
        let guest = SessionSnapshot(name: "g", state: .federated, identityId: "us-east-1:g", isGuest: true)
        XCTAssertTrue(guest.description.contains("guest"))
    }

    func testResultPrintingRedacts() {
        let result = FederationResult(identityId: "us-east-1:id", credentials: credentials)
        var dumped = ""
        dump(result, to: &dumped)
        for text in [String(describing: result), String(reflecting: result), dumped] {
            XCTAssertFalse(text.contains("model-secret-key"), text)
            XCTAssertFalse(text.contains("model-session-token"), text)
        }
    }

    // MARK: AuthProvider

    func testProviderLoginsKeysAndIdentifiersRoundTrip() {
        let cases: [(AuthProvider, String, String)] = [
            (.facebook, "graph.facebook.com", "facebook"),
            (.google, "accounts.google.com", "google"),
            (.amazon, "www.amazon.com", "amazon"),
            (.apple, "appleid.apple.com", "apple"),
            (.twitter, "api.twitter.com", "twitter"),
            (.oidc(issuer: "login.example.com"), "login.example.com", "oidc:login.example.com"),
            (.oidc(issuer: "https://issuer.example/path"), "https://issuer.example/path", "oidc:https://issuer.example/path"),
            (.saml(arn: "arn:aws:iam::123456789012:saml-provider/Corp"), "arn:aws:iam::123456789012:saml-provider/Corp",
             "saml:arn:aws:iam::123456789012:saml-provider/Corp"),
            (.custom(key: "login.mycompany.myapp"), "login.mycompany.myapp", "custom:login.mycompany.myapp"),
            (.developer, "cognito-identity.amazonaws.com", "developer"),
        ]
        for (provider, key, identifier) in cases {
            XCTAssertEqual(provider.loginsKey, key)
            XCTAssertEqual(provider.identifier, identifier)
            XCTAssertEqual(provider.description, identifier)
            XCTAssertEqual(AuthProvider(identifier: identifier), provider, identifier)
        }
    }

    func testOnlyJWTProvidersAreCheckedLocally() {
        XCTAssertEqual(
            [AuthProvider.facebook, .google, .amazon, .apple, .twitter, .oidc(issuer: "i"), .saml(arn: "a"), .custom(key: "k"), .developer]
                .map(\.issuesJWT),
            [false, true, false, true, false, true, false, false, true])
    }

    func testUnknownOrEmptyIdentifiersParseToNil() {
        for identifier in ["", "Google", "github", "oidc:", "saml:", "custom:", "oidc", "unknown:x", " google"] {
            XCTAssertNil(AuthProvider(identifier: identifier), identifier)
        }
    }

    func testSessionStateNames() {
        XCTAssertEqual(SessionState.allCases.map(\.description), ["notFederated", "federating", "federated", "expired", "terminated"])
    }
}
