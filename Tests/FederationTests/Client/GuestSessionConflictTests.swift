import BrokerTestSupport
@testable import Federation
import XCTest

/// A guest identity never silently replaces an authenticated one.
final class GuestSessionConflictTests: XCTestCase {
    func testGuestOnAnAuthenticatedSessionIsRefusedWithoutNetwork() async throws {
        let harness = try Harness()
        let first = try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let callsBefore = harness.fake.calls.count

        await assertThrows(FederationError.self, code: .sessionConflict) { try await harness.client.federateAsGuest(session: "alice") }

        XCTAssertEqual(harness.fake.calls.count, callsBefore, "refused before any request")
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.provider, .google)
        XCTAssertEqual(snapshot.identityId, first.identityId)
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testGuestAfterClearStartsANewGuestIdentity() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        try await harness.client.clear(session: "alice")
        try await harness.client.federateAsGuest(session: "alice")
        let snapshot = try await harness.client.session("alice")
        XCTAssertTrue(snapshot.isGuest)
        XCTAssertEqual(harness.fake.calls(.getId).last?.logins, nil, "a guest GetId carries no logins")
    }

    func testCredentialsDescriptionShowsExpirationAsISO8601() {
        let credentials = AWSCredentials(
            accessKeyId: "ASIAEXAMPLE", secretAccessKey: "s3cr3t", sessionToken: "t0k3n",
            expiration: Date(timeIntervalSince1970: 1_700_000_000))
        XCTAssertTrue(credentials.description.contains("2023-11-14T22:13:20Z"), credentials.description)
    }
}
