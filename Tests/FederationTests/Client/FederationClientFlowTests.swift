import BrokerTestSupport
@testable import Federation
import Foundation
import XCTest

/// The exchanges the client makes for each kind of login, as seen on the wire.
final class FederationClientFlowTests: XCTestCase {
    func testGoogleFederationCallsGetIdThenGetCredentialsAndReturnsTheCredentials() async throws {
        let harness = try Harness()
        let token = TestJWT.valid()
        harness.fake.enqueue(.identityId("us-east-1:google-identity"), for: .getId)
        harness.fake.enqueue(
            .credentials(
                identityId: "us-east-1:google-identity", accessKeyId: "ASIAGOOGLE", secretKey: "secret-google",
                sessionToken: "session-google", expiration: testEpoch.addingTimeInterval(3600)),
            for: .getCredentialsForIdentity)

        let result = try await harness.client.federate(token: token, provider: .google, session: "alice")

        XCTAssertEqual(harness.fake.operations, ["GetId", "GetCredentialsForIdentity"])
        let getId = try XCTUnwrap(harness.fake.calls(.getId).first)
        XCTAssertEqual(getId.string("IdentityPoolId"), testPoolId)
        XCTAssertEqual(getId.logins, ["accounts.google.com": token])
        XCTAssertFalse(getId.has("AccountId"), "AccountId is sent only when configured")
        let getCredentials = try XCTUnwrap(harness.fake.calls(.getCredentialsForIdentity).first)
        XCTAssertEqual(getCredentials.string("IdentityId"), "us-east-1:google-identity")
        XCTAssertEqual(getCredentials.logins, ["accounts.google.com": token])
        XCTAssertFalse(getCredentials.has("CustomRoleArn"))

        XCTAssertEqual(result.identityId, "us-east-1:google-identity")
        XCTAssertEqual(
            result.credentials,
            AWSCredentials(
                accessKeyId: "ASIAGOOGLE", secretAccessKey: "secret-google", sessionToken: "session-google",
                expiration: testEpoch.addingTimeInterval(3600)))
    }

    func testSnapshotAfterFederationIsFederatedWithTheCredentials() async throws {
        let harness = try Harness()
        let result = try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.name, "alice")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.identityId, FakeCognito.defaultIdentityId)
        XCTAssertEqual(snapshot.provider, .google)
        XCTAssertFalse(snapshot.isGuest)
        XCTAssertEqual(snapshot.credentials, result.credentials)
        XCTAssertEqual(snapshot.credentials?.secretAccessKey, FakeCognito.secretKey)
        XCTAssertEqual(snapshot.credentials?.sessionToken, FakeCognito.sessionToken)
        XCTAssertEqual(snapshot.expiration, testEpoch.addingTimeInterval(3600))
        let names = try await harness.client.sessionNames()
        XCTAssertEqual(names, ["alice"])
        let other = try await harness.client.session("bob")
        XCTAssertEqual(other.state, .notFederated)
        XCTAssertNil(other.credentials)
        XCTAssertNil(other.identityId)
    }

    func testDefaultSessionIsNamedDefault() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google)
        let snapshot = try await harness.client.session()
        XCTAssertEqual(snapshot.name, "default")
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testRequestsArePostsToTheEndpointWithJSON11HeadersAndALibraryUserAgent() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google)
        XCTAssertEqual(harness.fake.calls.count, 2)
        for call in harness.fake.calls {
            XCTAssertEqual(call.method, "POST")
            XCTAssertEqual(call.url, testEndpoint)
            XCTAssertEqual(call.header("Content-Type"), "application/x-amz-json-1.1")
            XCTAssertEqual(call.header("X-Amz-Target"), "AWSCognitoIdentityService.\(call.operation)")
            let userAgent = try XCTUnwrap(call.header("User-Agent"))
            XCTAssertTrue(userAgent.hasPrefix("IdentityBroker/"), userAgent)
            XCTAssertTrue(userAgent.contains(IdentityBrokerVersion.current), userAgent)
            XCTAssertNil(call.header("Authorization"), "GetId and GetCredentialsForIdentity are unsigned")
        }
    }

    func testAccountIdIsSentWithGetIdWhenConfigured() async throws {
        let harness = try Harness(configure: { $0.accountId = "123456789012" })
        try await harness.client.federate(token: TestJWT.valid(), provider: .google)
        XCTAssertEqual(harness.fake.calls(.getId).first?.string("AccountId"), "123456789012")
    }

    func testEveryProviderSendsItsTokenUnderItsLoginsKey() async throws {
        let jwt = TestJWT.valid(sub: "us-east-1:dev-identity-from-sub")
        let cases: [(AuthProvider, String, String)] = [
            (.facebook, "graph.facebook.com", "EAAGfacebookOpaqueAccessToken"),
            (.google, "accounts.google.com", jwt),
            (.amazon, "www.amazon.com", "Atza|amazonOpaqueAccessToken"),
            (.apple, "appleid.apple.com", jwt),
            (.twitter, "api.twitter.com", "twitter-token;twitter-secret"),
            (.oidc(issuer: "login.example.com"), "login.example.com", jwt),
            (.saml(arn: "arn:aws:iam::123456789012:saml-provider/Corp"), "arn:aws:iam::123456789012:saml-provider/Corp", "PHNhbWxwOlJlc3BvbnNl"),
            (.custom(key: "login.mycompany.myapp"), "login.mycompany.myapp", "custom-opaque"),
            (.developer, "cognito-identity.amazonaws.com", jwt),
        ]
        for (index, (provider, key, token)) in cases.enumerated() {
            let harness = try Harness()
            let session = "s\(index)"
            XCTAssertEqual(provider.loginsKey, key)
            try await harness.client.federate(token: token, provider: provider, session: session)
            let credentialsCall = try XCTUnwrap(harness.fake.calls(.getCredentialsForIdentity).last, "\(provider)")
            XCTAssertEqual(credentialsCall.logins, [key: token], "\(provider)")
            if provider == .developer {
                XCTAssertEqual(harness.fake.count(.getId), 0, "a developer token never goes to GetId")
            } else {
                XCTAssertEqual(harness.fake.calls(.getId).first?.logins, [key: token], "\(provider)")
            }
            let snapshot = try await harness.client.session(session)
            XCTAssertEqual(snapshot.provider, provider, "the provider survives the session record")
        }
    }

    func testOpaqueTokensOfNonJWTProvidersAreNotCheckedLocally() async throws {
        for provider in [AuthProvider.facebook, .amazon, .twitter, .saml(arn: "arn:aws:iam::1:saml-provider/X"), .custom(key: "k.example")] {
            let harness = try Harness()
            try await harness.client.federate(token: "not-a-jwt", provider: provider)
            XCTAssertEqual(harness.fake.count(.getCredentialsForIdentity), 1, "\(provider)")
        }
    }

    func testEmptyTokenFailsWithoutNetwork() async throws {
        let harness = try Harness()
        await assertThrows(FederationError.self, code: .invalidToken) { try await harness.client.federate(token: "", provider: .facebook) }
        XCTAssertEqual(harness.fake.calls.count, 0)
    }

    /// Cognito's limit for a `Logins` value: a longer token fails before any request (a
    /// megabyte forwarded from a user would otherwise be sent, and scrubbed from every error).
    func testATokenLongerThanCognitoTakesFailsWithoutNetwork() async throws {
        let harness = try Harness()
        let longest = String(repeating: "t", count: FederationClient.maximumTokenBytes)
        try await harness.client.federate(token: longest, provider: .custom(key: "k.example"))
        XCTAssertEqual(harness.fake.count(.getCredentialsForIdentity), 1)
        let error = await assertThrows(FederationError.self, code: .invalidToken) {
            try await harness.client.federate(token: longest + "t", provider: .custom(key: "k.example"), session: "other")
        }
        XCTAssertTrue(error?.message.contains("50000") ?? false, "\(String(describing: error))")
        XCTAssertEqual(harness.fake.count(.getCredentialsForIdentity), 1, "the long token was sent")
    }

    // MARK: Developer-authenticated identities

    func testDeveloperProvidedIdentityIdSkipsGetIdAndSendsTheCustomRoleArn() async throws {
        let harness = try Harness()
        let token = "moto-style-opaque-developer-token"  // not a JWT: the ID is given
        let roleArn = "arn:aws:iam::123456789012:role/Cognito_PoolAuth_Role"
        let result = try await harness.client.federate(
            token: token, provider: .developer,
            options: FederationOptions(developerProvidedIdentityId: "us-east-1:dev-provided", customRoleArn: roleArn),
            session: "dev")
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"])
        let call = try XCTUnwrap(harness.fake.calls.first)
        XCTAssertEqual(call.string("IdentityId"), "us-east-1:dev-provided")
        XCTAssertEqual(call.string("CustomRoleArn"), roleArn)
        XCTAssertEqual(call.logins, ["cognito-identity.amazonaws.com": token])
        XCTAssertEqual(result.identityId, "us-east-1:dev-provided")
    }

    func testDeveloperProvidedIdentityIdAlsoSkipsGetIdForOtherProviders() async throws {
        let harness = try Harness()
        try await harness.client.federate(
            token: TestJWT.valid(), provider: .google, options: FederationOptions(developerProvidedIdentityId: "us-east-1:given"))
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"])
        XCTAssertEqual(harness.fake.calls.first?.string("IdentityId"), "us-east-1:given")
    }

    func testCustomRoleArnIsSentForProviderTokensToo() async throws {
        let harness = try Harness()
        try await harness.client.federate(
            token: TestJWT.valid(), provider: .google, options: FederationOptions(customRoleArn: "arn:aws:iam::1:role/R"))
        XCTAssertEqual(harness.fake.calls(.getCredentialsForIdentity).first?.string("CustomRoleArn"), "arn:aws:iam::1:role/R")
        XCTAssertFalse(harness.fake.calls(.getId).first?.has("CustomRoleArn") ?? true)
    }

    func testDeveloperTokenWithoutIdUsesItsSubAndNeverCallsGetId() async throws {
        let harness = try Harness()
        let token = TestJWT.make(sub: "us-east-1:from-sub", exp: testEpoch.addingTimeInterval(600), iss: "https://cognito-identity.amazonaws.com")
        let result = try await harness.client.federate(token: token, provider: .developer, session: "dev")
        XCTAssertEqual(harness.fake.count(.getId), 0)
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"])
        XCTAssertEqual(harness.fake.calls.first?.string("IdentityId"), "us-east-1:from-sub")
        XCTAssertEqual(result.identityId, "us-east-1:from-sub")
    }

    func testDeveloperTokenWithoutSubFailsWithInvalidTokenAndNoCalls() async throws {
        let harness = try Harness()
        let token = TestJWT.make(sub: nil, exp: testEpoch.addingTimeInterval(600))
        await assertThrows(FederationError.self, code: .invalidToken) {
            try await harness.client.federate(token: token, provider: .developer, session: "dev")
        }
        XCTAssertEqual(harness.fake.calls.count, 0)
        let snapshot = try await harness.client.session("dev")
        XCTAssertEqual(snapshot.state, .notFederated)
    }

    func testDeveloperTokenWithEmptySubFailsWithInvalidToken() async throws {
        let harness = try Harness()
        let token = TestJWT.make(sub: "", exp: testEpoch.addingTimeInterval(600))
        await assertThrows(FederationError.self, code: .invalidToken) { try await harness.client.federate(token: token, provider: .developer) }
        XCTAssertEqual(harness.fake.calls.count, 0)
    }

    func testDeveloperSubIsUsedEvenWhenTheSessionHasACachedIdentity() async throws {
        let harness = try Harness()
        try await harness.client.federateAsGuest(session: "dev")
        harness.fake.resetRecording()
        let token = TestJWT.make(sub: "us-east-1:from-sub", exp: testEpoch.addingTimeInterval(600))
        try await harness.client.federate(token: token, provider: .developer, session: "dev")
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"])
        XCTAssertEqual(harness.fake.calls.first?.string("IdentityId"), "us-east-1:from-sub")
    }

    // MARK: Guests

    func testGuestCallsGetIdAndGetCredentialsWithoutLogins() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.identityId("us-east-1:guest"), for: .getId)
        let result = try await harness.client.federateAsGuest(session: "visitor")
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetCredentialsForIdentity"])
        XCTAssertFalse(harness.fake.calls[0].has("Logins"))
        XCTAssertEqual(harness.fake.calls[0].string("IdentityPoolId"), testPoolId)
        XCTAssertFalse(harness.fake.calls[1].has("Logins"))
        XCTAssertEqual(harness.fake.calls[1].string("IdentityId"), "us-east-1:guest")
        XCTAssertEqual(result.identityId, "us-east-1:guest")
        let snapshot = try await harness.client.session("visitor")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertTrue(snapshot.isGuest)
        XCTAssertNil(snapshot.provider)
        XCTAssertEqual(snapshot.identityId, "us-east-1:guest")
    }

    func testGuestAgainReusesTheGuestIdentityWithoutGetId() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.identityId("us-east-1:guest"), for: .getId)
        try await harness.client.federateAsGuest(session: "visitor")
        harness.fake.resetRecording()
        try await harness.client.federateAsGuest(session: "visitor")
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"])
        XCTAssertEqual(harness.fake.calls.first?.string("IdentityId"), "us-east-1:guest")
    }

    func testFederatingAGuestSessionLinksTheLoginToTheGuestIdentity() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.identityId("us-east-1:guest"), for: .getId)
        try await harness.client.federateAsGuest(session: "visitor")
        harness.fake.resetRecording()

        let token = TestJWT.valid()
        let result = try await harness.client.federate(token: token, provider: .google, session: "visitor")

        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"], "no GetId: the guest identity is reused")
        let call = try XCTUnwrap(harness.fake.calls.first)
        XCTAssertEqual(call.string("IdentityId"), "us-east-1:guest")
        XCTAssertEqual(call.logins, ["accounts.google.com": token])
        XCTAssertEqual(result.identityId, "us-east-1:guest")
        let snapshot = try await harness.client.session("visitor")
        XCTAssertEqual(snapshot.identityId, "us-east-1:guest")
        XCTAssertFalse(snapshot.isGuest)
        XCTAssertEqual(snapshot.provider, .google)
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testGuestOfAClearedAuthenticatedSessionGetsAFreshGuestIdentity() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.identityId("us-east-1:authenticated"), for: .getId)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "s")
        try await harness.client.clear(session: "s")
        harness.fake.resetRecording()
        harness.fake.enqueue(.identityId("us-east-1:new-guest"), for: .getId)
        try await harness.client.federateAsGuest(session: "s")
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetCredentialsForIdentity"])
        XCTAssertFalse(harness.fake.calls[0].has("Logins"))
        XCTAssertEqual(harness.fake.calls[1].string("IdentityId"), "us-east-1:new-guest")
    }

    func testIdentityIdInTheCredentialsResponseWins() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.identityId("us-east-1:asked"), for: .getId)
        harness.fake.enqueue(.credentials(identityId: "us-east-1:answered", expiration: testEpoch.addingTimeInterval(3600)), for: .getCredentialsForIdentity)
        let result = try await harness.client.federate(token: TestJWT.valid(), provider: .google)
        XCTAssertEqual(result.identityId, "us-east-1:answered")
    }
}
