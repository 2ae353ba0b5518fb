import BrokerTestSupport
import Federation
import Foundation
import SecureStorage
import XCTest

/// Federation against moto's server: an independent implementation of Cognito
/// Identity, reached through libcurl like production.
final class MotoInteropTests: XCTestCase {
    nonisolated(unsafe) static var moto: MotoServer?

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

    private func client(
        pool: String, margin: Duration = .seconds(5), retry: RetryPolicy = .standard, keystore: (any Keystore)? = nil
    ) throws -> FederationClient {
        let moto = try server()
        return try FederationClient(
            configuration: FederationConfiguration(identityPoolId: pool, endpoint: moto.endpoint, expiryMargin: margin, retry: retry),
            keystore: keystore
        )
    }

    func testGuestIdentityIsCreatedAndReused() async throws {
        let pool = try await server().createIdentityPool(allowUnauthenticated: true)
        let client = try client(pool: pool)
        let first = try await client.federateAsGuest(session: "visitor")
        XCTAssertTrue(first.identityId.hasPrefix("us-east-1:"), first.identityId)
        XCTAssertFalse(first.credentials.accessKeyId.isEmpty)
        let snapshot = try await client.session("visitor")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertTrue(snapshot.isGuest)
        XCTAssertEqual(snapshot.credentials, first.credentials)

        let second = try await client.federateAsGuest(session: "visitor")
        XCTAssertEqual(second.identityId, first.identityId, "a session's guest identity is reused, not recreated")
    }

    /// HTTPS to an endpoint whose certificate a private authority signed (as a proxy that
    /// inspects TLS does): with ``FederationConfiguration/certificateAuthorityFile`` naming
    /// the authority the federation succeeds; with the system's authorities alone it fails
    /// TLS verification, saying how to name one. A file holding no certificate is refused
    /// when the client is made.
    func testAFederationOverTLSTrustsTheConfiguredCertificateAuthority() async throws {
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        let moto = try MotoServer.start(certificates: certificates)
        defer { moto.stop() }
        let pool = try await moto.createIdentityPool(allowUnauthenticated: true)
        XCTAssertTrue(moto.endpoint.hasPrefix("https://"))

        let trusting = try FederationClient(configuration: FederationConfiguration(
            identityPoolId: pool, endpoint: moto.endpoint, certificateAuthorityFile: certificates.authorityFile))
        let result = try await trusting.federateAsGuest(session: "visitor")
        XCTAssertTrue(result.identityId.hasPrefix("us-east-1:"), result.identityId)

        // The same authority, another name for the same server: the certificate names
        // 127.0.0.1 only, so the host name check refuses it (a trusted authority is not enough).
        let otherName = moto.endpoint.replacingOccurrences(of: "127.0.0.1", with: "localhost")
        XCTAssertNotEqual(otherName, moto.endpoint)
        let misnamed = try FederationClient(configuration: FederationConfiguration(
            identityPoolId: pool, endpoint: otherName, certificateAuthorityFile: certificates.authorityFile))
        do {
            _ = try await misnamed.federateAsGuest(session: "visitor")
            XCTFail("a certificate for 127.0.0.1 was accepted for localhost")
        } catch {
            // Refused by the TLS check (not a connection that never reached moto).
            XCTAssertEqual(error.code, .network, "\(error)")
            XCTAssertEqual(error.curlCode, 60, "not CURLE_PEER_FAILED_VERIFICATION: \(error)")
        }

        let system = try FederationClient(configuration: FederationConfiguration(identityPoolId: pool, endpoint: moto.endpoint))
        do {
            _ = try await system.federateAsGuest(session: "visitor")
            XCTFail("the system's authorities trusted a private one")
        } catch {
            XCTAssertEqual(error.code, .network, "\(error)")
            XCTAssertTrue(error.message.contains("AWS_CA_BUNDLE"), "\(error)")
        }

        XCTAssertThrowsError(try FederationClient(configuration: FederationConfiguration(
            identityPoolId: pool, endpoint: moto.endpoint, certificateAuthorityFile: certificates.keyFile))) { error in
            XCTAssertEqual((error as? FederationError)?.code, .invalidConfiguration, "\(error)")
        }
    }

    func testGoogleFederation() async throws {
        let pool = try await server().createIdentityPool(supportedLoginProviders: ["accounts.google.com": "client"])
        let client = try client(pool: pool)
        let token = TestJWT.valid(sub: "google-user-1", issuer: "https://accounts.google.com", audience: "client")
        let result = try await client.federate(token: token, provider: .google, session: "alice")
        XCTAssertTrue(result.identityId.hasPrefix("us-east-1:"))
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.provider, .google)
        XCTAssertEqual(snapshot.identityId, result.identityId)
        XCTAssertEqual(snapshot.credentials?.accessKeyId, result.credentials.accessKeyId)
    }

    func testOIDCFederationWithCustomRole() async throws {
        let pool = try await server().createIdentityPool(openIdConnectProviderARNs: ["arn:aws:iam::123456789012:oidc-provider/login.example.com"])
        let client = try client(pool: pool)
        let token = TestJWT.valid(sub: "oidc-user", issuer: "https://login.example.com", audience: "client")
        let result = try await client.federate(
            token: token,
            provider: .oidc(issuer: "login.example.com"),
            options: FederationOptions(customRoleArn: "arn:aws:iam::123456789012:role/reader"),
            session: "bob"
        )
        XCTAssertFalse(result.credentials.sessionToken.isEmpty)
        let snapshot = try await client.session("bob")
        XCTAssertEqual(snapshot.provider, .oidc(issuer: "login.example.com"))
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testDeveloperAuthenticatedFlow() async throws {
        let moto = try server()
        let pool = try await moto.createIdentityPool(developerProviderName: "login.mycompany")
        // The backend half: the developer mints a token for its own user ID.
        let minted = try await moto.developerToken(poolId: pool, developerProviderName: "login.mycompany", userId: "user-42")
        // The client half: moto's tokens are not JWTs, so the identity ID travels with it.
        let client = try client(pool: pool)
        let result = try await client.federate(
            token: minted.token,
            provider: .developer,
            options: FederationOptions(developerProvidedIdentityId: minted.identityId),
            session: "carol"
        )
        XCTAssertEqual(result.identityId, minted.identityId)
        let snapshot = try await client.session("carol")
        XCTAssertEqual(snapshot.provider, .developer)
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testGuestThenLoginKeepsTheIdentity() async throws {
        let pool = try await server().createIdentityPool(supportedLoginProviders: ["accounts.google.com": "client"])
        let client = try client(pool: pool)
        let guest = try await client.federateAsGuest(session: "dave")
        let linked = try await client.federate(
            token: TestJWT.valid(sub: "dave", issuer: "https://accounts.google.com", audience: "client"), provider: .google, session: "dave")
        XCTAssertEqual(linked.identityId, guest.identityId)
        let snapshot = try await client.session("dave")
        XCTAssertFalse(snapshot.isGuest)
        XCTAssertEqual(snapshot.provider, .google)
    }

    func testExpiryMarginDecidesTheState() async throws {
        // moto issues 90-second credentials.
        let pool = try await server().createIdentityPool()
        let strict = try client(pool: pool, margin: .seconds(120))
        try await strict.federateAsGuest(session: "s")
        let expired = try await strict.session("s")
        XCTAssertEqual(expired.state, .expired, "90 s credentials are already inside a 120 s margin")
        XCTAssertNil(expired.credentials, "credentials are given out only when federated")
        XCTAssertNotNil(expired.expiration)

        let lenient = try client(pool: pool, margin: .seconds(5))
        try await lenient.federateAsGuest(session: "s")
        let federated = try await lenient.session("s")
        XCTAssertEqual(federated.state, .federated)
    }

    func testExpiryIsObservedWithoutReading() async throws {
        let pool = try await server().createIdentityPool()
        // 90 s credentials with an 86 s margin expire about 4 s after issue: long enough
        // that a busy machine still records `federated` first.
        let client = try client(pool: pool, margin: .seconds(86))
        let updates = await client.stateUpdates(for: "eve")
        try await client.federateAsGuest(session: "eve")
        let seen = try await Self.collect(updates, until: .expired, timeout: .seconds(20))
        XCTAssertEqual(seen, [.notFederated, .federating, .federated, .expired])
    }

    func testObserveAndClear() async throws {
        let pool = try await server().createIdentityPool()
        let client = try client(pool: pool)
        let all = await client.allStateUpdates()
        try await client.federateAsGuest(session: "frank")
        try await client.clear(session: "frank")
        let cleared = try await client.session("frank")
        XCTAssertEqual(cleared.state, .notFederated)
        XCTAssertNil(cleared.identityId)
        var events: [SessionEvent] = []
        for await event in all {
            events.append(event)
            if event.state == .notFederated { break }
        }
        XCTAssertEqual(events.map(\.state), [.federating, .federated, .notFederated])
        XCTAssertTrue(events.allSatisfy { $0.session == "frank" })
    }

    func testManySessionsSideBySide() async throws {
        let pool = try await server().createIdentityPool(supportedLoginProviders: ["accounts.google.com": "client"])
        let client = try client(pool: pool)
        let ids = try await withThrowingTaskGroup(of: String.self) { group in
            for user in 0..<16 {
                group.addTask {
                    let token = TestJWT.valid(sub: "user-\(user)", issuer: "https://accounts.google.com", audience: "client")
                    return try await client.federate(token: token, provider: .google, session: "user-\(user)").identityId
                }
            }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        XCTAssertEqual(Set(ids).count, 16)
        let names = try await client.sessionNames()
        XCTAssertEqual(names.count, 16)
    }

    /// moto answers an unknown pool with an HTML 500: a service failure (typed, with its
    /// status), after which the shared store holds nothing new and the other client's
    /// session is as it was.
    func testAServiceFailureSavesNothing() async throws {
        let pool = try await server().createIdentityPool()
        let store = InMemoryKeystore()
        let good = try client(pool: pool, keystore: store)
        let first = try await good.federateAsGuest(session: "gina")
        let broken = try client(pool: "us-east-1:00000000-0000-0000-0000-000000000000", retry: .none, keystore: store)
        do {
            try await broken.federateAsGuest(session: "hal")
            XCTFail("an unknown pool must fail")
        } catch {
            XCTAssertEqual(error.code, .serviceUnavailable)
            XCTAssertEqual(error.httpStatus, 500)
        }
        let hal = try await good.session("hal")
        XCTAssertEqual(hal.state, .notFederated, "a failed federation was saved")
        let names = try await broken.sessionNames()
        XCTAssertEqual(names, ["gina"])
        let snapshot = try await broken.session("gina")
        XCTAssertEqual(snapshot.identityId, first.identityId)
        XCTAssertEqual(snapshot.credentials, first.credentials)
    }

    static func collect(
        _ stream: AsyncStream<SessionState>,
        until last: SessionState,
        timeout: Duration
    ) async throws -> [SessionState] {
        try await withThrowingTaskGroup(of: [SessionState].self) { group in
            group.addTask {
                var seen: [SessionState] = []
                for await state in stream {
                    seen.append(state)
                    if state == last { break }
                }
                return seen
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw MotoError(message: "timed out waiting for \(last)")
            }
            let result = try await group.next()!
            group.cancelAll()
            return result
        }
    }
}
