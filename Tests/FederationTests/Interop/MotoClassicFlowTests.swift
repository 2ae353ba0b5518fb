import BrokerTestSupport
import Federation
import Foundation
import XCTest

/// The classic flow against moto: its Cognito Identity's `GetOpenIdToken` and its STS's
/// `AssumeRoleWithWebIdentity` (moto needs no IAM role to exist for it), through libcurl.
final class MotoClassicFlowTests: XCTestCase {
    nonisolated(unsafe) static var moto: MotoServer?
    static let roleArn = "arn:aws:iam::123456789012:role/ClassicInterop"

    override class func tearDown() {
        moto?.stop()
        moto = nil
        super.tearDown()
    }

    private func server() throws -> MotoServer {
        if let moto = Self.moto { return moto }
        let moto = try MotoServer.start()
        Self.moto = moto
        return moto
    }

    private func client(pool: String) throws -> FederationClient {
        let moto = try server()
        return try FederationClient(
            configuration: FederationConfiguration(identityPoolId: pool, endpoint: moto.endpoint, stsEndpoint: moto.endpoint, expiryMargin: .seconds(5)))
    }

    private func classic(duration: Int? = nil, sessionName: String? = nil, policy: String? = nil) -> FederationOptions {
        FederationOptions(flow: .classic(ClassicFlowOptions(roleArn: Self.roleArn, roleSessionName: sessionName, durationSeconds: duration, sessionPolicy: policy)))
    }

    func testGoogleLoginThroughTheClassicFlow() async throws {
        let pool = try await server().createIdentityPool(supportedLoginProviders: ["accounts.google.com": "client"])
        let client = try client(pool: pool)
        let policy = #"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}]}"#
        let result = try await client.federate(
            token: TestJWT.valid(sub: "classic-google", issuer: "https://accounts.google.com", audience: "client"), provider: .google,
            options: classic(duration: 900, policy: policy), session: "tenant:alice")
        XCTAssertTrue(result.identityId.hasPrefix("us-east-1:"), result.identityId)
        XCTAssertEqual(result.assumedRoleArn, "arn:aws:sts::123456789012:assumed-role/ClassicInterop/tenant_alice")
        XCTAssertTrue(result.credentials.accessKeyId.hasPrefix("ASIA"), "STS's credentials, not Cognito's: \(result.credentials.accessKeyId)")
        XCTAssertNotEqual(result.credentials.accessKeyId, "TESTACCESSKEY12345")
        // moto honours DurationSeconds: 900 s from now, not Cognito's 90 s or STS's default hour.
        XCTAssertEqual(result.credentials.expiration.timeIntervalSinceNow, 900, accuracy: 60)
        let snapshot = try await client.session("tenant:alice")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.credentials, result.credentials)

        // Again: the identity is known, so GetId is skipped and the same identity assumes the role.
        let again = try await client.federate(
            token: TestJWT.valid(sub: "classic-google", issuer: "https://accounts.google.com", audience: "client"), provider: .google,
            options: classic(sessionName: "explicit-name"), session: "tenant:alice")
        XCTAssertEqual(again.identityId, result.identityId)
        XCTAssertEqual(again.assumedRoleArn, "arn:aws:sts::123456789012:assumed-role/ClassicInterop/explicit-name")
        XCTAssertEqual(again.credentials.expiration.timeIntervalSinceNow, 3600, accuracy: 60, "STS's default hour")
    }

    func testGuestThroughTheClassicFlowThenLinkedLogin() async throws {
        let pool = try await server().createIdentityPool(allowUnauthenticated: true, supportedLoginProviders: ["accounts.google.com": "client"])
        let client = try client(pool: pool)
        let guest = try await client.federateAsGuest(options: classic(), session: "visitor")
        XCTAssertEqual(guest.assumedRoleArn, "arn:aws:sts::123456789012:assumed-role/ClassicInterop/visitor")
        let snapshot = try await client.session("visitor")
        XCTAssertTrue(snapshot.isGuest)
        let login = try await client.federate(
            token: TestJWT.valid(sub: "linked", issuer: "https://accounts.google.com", audience: "client"), provider: .google, options: classic(), session: "visitor")
        XCTAssertEqual(login.identityId, guest.identityId, "the login is linked to the guest identity")
    }

    func testDeveloperIdentityThroughTheClassicFlow() async throws {
        let moto = try server()
        let pool = try await moto.createIdentityPool(developerProviderName: "login.classic.test")
        let developer = try await moto.developerToken(poolId: pool, developerProviderName: "login.classic.test", userId: "dev-1")
        let client = try client(pool: pool)
        let result = try await client.federate(
            token: developer.token, provider: .developer,
            options: FederationOptions(developerProvidedIdentityId: developer.identityId, flow: classic().flow), session: "dev")
        XCTAssertEqual(result.identityId, developer.identityId)
        XCTAssertNotNil(result.assumedRoleArn)
    }

    func testOutOfRangeDurationIsRefusedLocally() async throws {
        let pool = try await server().createIdentityPool(allowUnauthenticated: true)
        let client = try client(pool: pool)
        do {
            try await client.federateAsGuest(options: classic(duration: 43_201), session: "visitor")
            XCTFail("accepted")
        } catch {
            XCTAssertEqual(error.code, .invalidConfiguration)
        }
        let snapshot = try await client.session("visitor")
        XCTAssertEqual(snapshot.state, .notFederated)
    }
}
