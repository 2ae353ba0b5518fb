import BrokerTestSupport
@testable import Federation
import Foundation
import SecureStorage
import XCTest

/// The session state machine: failures, termination, serialisation, expiry, observation.
final class FederationClientStateTests: XCTestCase {
    // MARK: A failure leaves the previous session intact

    func testFailedFederationLeavesThePreviousSessionIntactAndObserversSeeItBack() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.identityId("us-east-1:alice"), for: .getId)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let before = try await harness.client.session("alice")
        XCTAssertEqual(before.state, .federated)
        let updates = await harness.client.stateUpdates(for: "alice")

        // A malformed answer, with no cached-ID retry to rescue it.
        harness.fake.enqueue(.raw(body: #"{"IdentityId":"us-east-1:alice","Credentials":{"AccessKeyId":"#), for: .getCredentialsForIdentity)
        await assertThrows(FederationError.self, code: .invalidResponse) {
            try await harness.client.federate(token: TestJWT.valid(sub: "2"), provider: .google, session: "alice")
        }

        let after = try await harness.client.session("alice")
        XCTAssertEqual(after, before)
        XCTAssertEqual(after.state, .federated)
        XCTAssertEqual(after.identityId, "us-east-1:alice")
        XCTAssertEqual(after.credentials?.secretAccessKey, FakeCognito.secretKey)
        let states = await collect(3, from: updates)
        XCTAssertEqual(states, [.federated, .federating, .federated])
    }

    func testFailedFederationOfADifferentProviderKeepsTheOldProvider() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: "EAAG-facebook", provider: .facebook, session: "alice")
        harness.fake.enqueue(.error("ExternalServiceException", message: "provider down", status: 400), for: .getCredentialsForIdentity)
        await assertThrows(FederationError.self, code: .externalService) {
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.provider, .facebook)
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testFailedFirstFederationLeavesNoSession() async throws {
        let harness = try Harness()
        let updates = await harness.client.stateUpdates(for: "alice")
        harness.fake.enqueue(.error("NotAuthorizedException", message: "Invalid login token."), for: .getId)
        await assertThrows(FederationError.self, code: .notAuthorized) {
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        XCTAssertEqual(harness.fake.operations, ["GetId"])
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .notFederated)
        XCTAssertNil(snapshot.identityId)
        let names = try await harness.client.sessionNames()
        XCTAssertEqual(names, [])
        let states = await collect(3, from: updates)
        XCTAssertEqual(states, [.notFederated, .federating, .notFederated])
    }

    /// An answer whose credentials expired already, or would outlast any AWS flow (a broken
    /// emulator, proxy or endpoint), is refused and not stored: the store keeps the record with
    /// the later expiration, so one far in the future would win over every later federation.
    func testCredentialsWithAnImplausibleExpirationAreRefusedAndNotStored() async throws {
        let keystore = InMemoryKeystore()
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        func client() throws -> FederationClient {
            try FederationClient(
                configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
                transport: fake.transport, keystore: keystore, environment: [:], retryRunner: noSleepRunner(),
                now: { testEpoch }, logger: nil)
        }
        let harness = (client: try client(), fake: fake)
        let first = try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        for (expiration, words) in [
            (testEpoch.addingTimeInterval(10 * 365 * 86400), "hours, longer than any AWS flow gives"),
            (testEpoch.addingTimeInterval(37 * 3600), "hours, longer than any AWS flow gives"),
            (testEpoch.addingTimeInterval(-60), "expired 60 s ago"),
            (testEpoch, "expired 0 s ago"),
        ] {
            harness.fake.expiration = expiration
            let error = await assertThrows(FederationError.self, code: .invalidResponse) {
                try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
            }
            XCTAssertTrue(error?.message.contains(words) ?? false, error?.message ?? "")
            let snapshot = try await harness.client.session("alice")
            XCTAssertEqual(snapshot.state, .federated)
            XCTAssertEqual(snapshot.credentials, first.credentials, "the previous session stays")
            let stored = try await client().session("alice")
            XCTAssertEqual(stored.credentials, first.credentials, "nothing was stored")
        }
        // The longest real lifetime (STS: 12 hours) is accepted, and then replaced as usual.
        harness.fake.expiration = testEpoch.addingTimeInterval(12 * 3600)
        let long = try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        XCTAssertEqual(long.credentials.expiration, testEpoch.addingTimeInterval(12 * 3600))
    }

    /// A later federation of a session replaces it even when its credentials expire sooner
    /// (a shorter duration, a narrower policy, another provider or role): the session holds
    /// what the caller federated last, for this client, another client of the store, and the
    /// next federation after it. (The later expiration decides only between federations that
    /// race each other.)
    func testALaterFederationReplacesTheSessionEvenWhenItsCredentialsExpireSooner() async throws {
        let keystore = InMemoryKeystore()
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(12 * 3600))
        func client() throws -> FederationClient {
            try FederationClient(
                configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
                transport: fake.transport, keystore: keystore, environment: [:], retryRunner: noSleepRunner(),
                now: { testEpoch }, logger: nil)
        }
        let first = try client(), second = try client()
        try await first.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        for (minutes, provider) in [(60, AuthProvider.facebook), (30, .google), (45, .amazon)] {
            fake.expiration = testEpoch.addingTimeInterval(Double(minutes) * 60)
            let result = try await first.federate(token: TestJWT.valid(), provider: provider, session: "alice")
            // Another client's cache follows the store's change feed.
            let followed = await eventually { (try? await second.session("alice"))?.expiration == result.credentials.expiration }
            XCTAssertTrue(followed, "\(minutes) min: another client kept the session it held")
            for (name, reader) in [("the federating client", first), ("another client", second), ("a new client", try client())] {
                let snapshot = try await reader.session("alice")
                XCTAssertEqual(snapshot.expiration, result.credentials.expiration, "\(minutes) min, \(name)")
                XCTAssertEqual(snapshot.provider, provider, "\(minutes) min, \(name)")
                let served = try await reader.credentials(for: "alice")
                XCTAssertEqual(served, result.credentials, "\(minutes) min, \(name)")
            }
        }
        // The other client follows the session it read, too.
        fake.expiration = testEpoch.addingTimeInterval(20 * 60)
        let fromSecond = try await second.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let heard = await eventually { (try? await first.session("alice"))?.expiration == fromSecond.credentials.expiration }
        XCTAssertTrue(heard, "the first client did not take the second one's later federation")
        let stored = try await client().session("alice")
        XCTAssertEqual(stored.expiration, fromSecond.credentials.expiration)
    }

    // MARK: Terminated identities

    func testResourceNotFoundForADeveloperProvidedIdTerminatesTheSessionUntilCleared() async throws {
        let harness = try Harness()
        let options = FederationOptions(developerProvidedIdentityId: "us-east-1:gone")
        try await harness.client.federate(token: "opaque-dev-token", provider: .developer, options: options, session: "dev")
        let updates = await harness.client.stateUpdates(for: "dev")
        harness.fake.enqueue(
            .error("ResourceNotFoundException", message: "Identity 'us-east-1:gone' not found."), for: .getCredentialsForIdentity)

        let error = await assertThrows(FederationError.self, code: .identityTerminated) {
            try await harness.client.federate(token: "opaque-dev-token", provider: .developer, options: options, session: "dev")
        }
        XCTAssertEqual(error?.serviceErrorType, "ResourceNotFoundException")
        XCTAssertEqual(error?.operation, "GetCredentialsForIdentity")
        XCTAssertEqual(error?.httpStatus, 400)
        XCTAssertEqual(harness.fake.count(.getId), 0)
        var snapshot = try await harness.client.session("dev")
        XCTAssertEqual(snapshot.state, .terminated)
        XCTAssertNil(snapshot.credentials)
        let states = await collect(3, from: updates)
        XCTAssertEqual(states, [.federated, .federating, .terminated])

        // Federating or going guest again fails without the network.
        harness.fake.resetRecording()
        await assertThrows(FederationError.self, code: .identityTerminated) {
            try await harness.client.federate(token: "opaque-dev-token", provider: .developer, options: options, session: "dev")
        }
        await assertThrows(FederationError.self, code: .identityTerminated) {
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "dev")
        }
        await assertThrows(FederationError.self, code: .identityTerminated) { try await harness.client.federateAsGuest(session: "dev") }
        XCTAssertEqual(harness.fake.calls.count, 0)
        snapshot = try await harness.client.session("dev")
        XCTAssertEqual(snapshot.state, .terminated)

        // Clear, then federate from scratch.
        try await harness.client.clear(session: "dev")
        snapshot = try await harness.client.session("dev")
        XCTAssertEqual(snapshot.state, .notFederated)
        try await harness.client.federate(
            token: "opaque-dev-token", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:new"),
            session: "dev")
        snapshot = try await harness.client.session("dev")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.identityId, "us-east-1:new")
    }

    func testForbiddenIdentityTerminatesTheSession() async throws {
        let harness = try Harness()
        try await harness.client.federate(
            token: "t", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:x"), session: "dev")
        harness.fake.enqueue(
            .init(status: 400, body: try Fixtures.bytes("error.NotAuthorized.forbidden")), for: .getCredentialsForIdentity)
        await assertThrows(FederationError.self, code: .identityTerminated) {
            try await harness.client.federate(
                token: "t", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:x"), session: "dev")
        }
        let snapshot = try await harness.client.session("dev")
        XCTAssertEqual(snapshot.state, .terminated)
    }

    /// An identity ID the caller names for one call (mistyped, or another region's) that is
    /// not the session's own: Cognito saying it is gone fails the call and leaves the session,
    /// and its valid credentials, as they were. Only the session's own identity terminates it.
    func testAGoneIdentityTheCallerNamedLeavesTheSessionsOwnIntact() async throws {
        let harness = try Harness()
        let held = try await harness.client.federate(
            token: "t", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:mine"), session: "dev")
        for answer in [
            FakeCognito.Reply.error("ResourceNotFoundException", message: "Identity 'us-east-1:typo' not found."),
            .init(status: 400, body: try Fixtures.bytes("error.NotAuthorized.forbidden")),
        ] {
            harness.fake.enqueue(answer, for: .getCredentialsForIdentity)
            let error = await assertThrows(FederationError.self) {
                try await harness.client.federate(
                    token: "t", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:typo"), session: "dev")
            }
            XCTAssertNotEqual(error?.code, .identityTerminated)
            XCTAssertTrue(error?.message.contains("was not changed") ?? false, error?.message ?? "")
            let snapshot = try await harness.client.session("dev")
            XCTAssertEqual(snapshot.state, .federated)
            XCTAssertEqual(snapshot.identityId, "us-east-1:mine")
            XCTAssertEqual(snapshot.credentials, held.credentials)
        }
        // A fresh session is not terminated by a named identity either: it never held it.
        harness.fake.enqueue(.error("ResourceNotFoundException", message: "Identity 'us-east-1:typo' not found."), for: .getCredentialsForIdentity)
        await assertThrows(FederationError.self, code: .resourceNotFound) {
            try await harness.client.federate(
                token: "t", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:typo"), session: "fresh")
        }
        let fresh = try await harness.client.session("fresh")
        XCTAssertEqual(fresh.state, .notFederated)
    }

    /// A harness whose session "visitor" holds a guest identity that Cognito answers next as
    /// disabled, its recording reset.
    private func guestWhoseIdentityIsDisabled() async throws -> Harness {
        let harness = try Harness()
        let guest = try await harness.client.federateAsGuest(session: "visitor")
        harness.fake.resetRecording()
        harness.fake.enqueue(
            .error("NotAuthorizedException", message: "Identity '\(guest.identityId)' is disabled."), for: .getCredentialsForIdentity)
        return harness
    }

    /// "Forbidden" is what Cognito says of a guest identity a login was linked to (by another
    /// client): not a disabled one. The cached-ID rule applies: GetId gives a new guest
    /// identity, and the session is not terminated.
    func testAGuestIdentityForbiddenBecauseALoginWasLinkedToItIsReplacedNotTerminated() async throws {
        let harness = try Harness()
        try await harness.client.federateAsGuest(session: "visitor")
        harness.fake.resetRecording()
        harness.fake.enqueue(
            .init(status: 400, body: try Fixtures.bytes("error.NotAuthorized.forbidden")), for: .getCredentialsForIdentity)
        harness.fake.enqueue(.identityId("us-east-1:22222222-3333-4444-5555-666666666666"), for: .getId)
        let result = try await harness.client.federateAsGuest(session: "visitor")
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity", "GetId", "GetCredentialsForIdentity"])
        XCTAssertEqual(result.identityId, "us-east-1:22222222-3333-4444-5555-666666666666")
        let state = try await harness.client.session("visitor").state
        XCTAssertEqual(state, .federated)
    }

    /// An identity the service says is disabled is refused, not wrong: a cached guest
    /// identity answered so is not swapped for a new one through GetId (which would route
    /// around whoever disabled it); the session becomes terminated.
    func testADisabledGuestIdentityTerminatesTheSessionWithoutANewOne() async throws {
        let harness = try await guestWhoseIdentityIsDisabled()
        await assertThrows(FederationError.self, code: .identityTerminated) { try await harness.client.federateAsGuest(session: "visitor") }
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity"], "a new guest identity was asked for")
        let state = try await harness.client.session("visitor").state
        XCTAssertEqual(state, .terminated)
    }

    /// A login on a session whose guest identity was disabled is not refused with it: GetId
    /// names the login's own identity, as for any cached ID Cognito rejects.
    func testALoginOverADisabledGuestIdentityGetsTheLoginsOwn() async throws {
        let harness = try await guestWhoseIdentityIsDisabled()
        harness.fake.enqueue(.identityId("us-east-1:11111111-2222-3333-4444-555555555555"), for: .getId)
        let result = try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "visitor")
        XCTAssertEqual(harness.fake.operations, ["GetCredentialsForIdentity", "GetId", "GetCredentialsForIdentity"])
        XCTAssertEqual(result.identityId, "us-east-1:11111111-2222-3333-4444-555555555555")
        let snapshot = try await harness.client.session("visitor")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.provider, .google)
    }

    func testResourceNotFoundFromGetIdDoesNotTerminate() async throws {
        let harness = try Harness()
        harness.fake.enqueue(.error("ResourceNotFoundException", message: "IdentityPool 'x' not found."), for: .getId)
        await assertThrows(FederationError.self, code: .resourceNotFound) {
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .notFederated)
    }

    // MARK: Serialisation

    func testConcurrentFederationsOfOneSessionAreSerialised() async throws {
        let harness = try Harness()
        harness.fake.responseDelay = .milliseconds(20)
        harness.fake.holdUntilInFlight(2, timeout: .milliseconds(100))
        let client = harness.client
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<4 {
                group.addTask {
                    try await client.federate(token: TestJWT.valid(sub: "u\(index)"), provider: .google, session: "alice")
                }
            }
            try await group.waitForAll()
        }
        XCTAssertEqual(harness.fake.maxInFlight, 1, "one session's federations never overlap")
        // The first one fetched the identity; the others reused it.
        XCTAssertEqual(harness.fake.count(.getId), 1)
        XCTAssertEqual(harness.fake.count(.getCredentialsForIdentity), 4)
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testFederationsOfDifferentSessionsRunConcurrently() async throws {
        let harness = try Harness()
        harness.fake.holdUntilInFlight(2, timeout: .seconds(5))
        let client = harness.client
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for session in ["alice", "bob"] {
                group.addTask {
                    try await client.federate(token: TestJWT.valid(sub: session), provider: .google, session: session)
                }
            }
            try await group.waitForAll()
        }
        XCTAssertGreaterThanOrEqual(harness.fake.maxInFlight, 2)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(4), "neither waited for the barrier to time out")
        let alice = try await client.session("alice")
        let bob = try await client.session("bob")
        XCTAssertEqual(alice.state, .federated)
        XCTAssertEqual(bob.state, .federated)
    }

    func testClearWaitsForAFederationInFlight() async throws {
        let harness = try Harness()
        harness.fake.responseDelay = .milliseconds(50)
        let client = harness.client
        let federation = Task { try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice") }
        let started = await eventually { harness.fake.calls.count > 0 }
        XCTAssertTrue(started)
        try await client.clear(session: "alice")
        _ = try await federation.value
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.state, .notFederated, "clear ran after the federation, not before it")
    }

    // MARK: Expiry

    func testSessionExpiresAtExpirationMinusTheDefaultMargin() async throws {
        let harness = try Harness()
        XCTAssertEqual(harness.client.configuration!.expiryMargin, .seconds(120))
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let expiration = testEpoch.addingTimeInterval(3600)

        harness.clock.set(expiration.addingTimeInterval(-121))
        var snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertNotNil(snapshot.credentials)

        harness.clock.set(expiration.addingTimeInterval(-119))
        snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .expired)
        XCTAssertNil(snapshot.credentials, "credentials are returned only when federated")
        XCTAssertEqual(snapshot.expiration, expiration, "the expiration is kept")
        XCTAssertEqual(snapshot.identityId, FakeCognito.defaultIdentityId)
        XCTAssertEqual(snapshot.provider, .google)
    }

    func testExpiryMarginIsConfigurable() async throws {
        let expiration = testEpoch.addingTimeInterval(3600)
        for (margin, expected) in [(Duration.seconds(10), SessionState.federated), (.seconds(300), .expired)] {
            let harness = try Harness(configure: { $0.expiryMargin = margin })
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
            harness.clock.set(expiration.addingTimeInterval(-200))
            let snapshot = try await harness.client.session("alice")
            XCTAssertEqual(snapshot.state, expected, "margin \(margin)")
            XCTAssertEqual(snapshot.credentials != nil, expected == .federated)
        }
    }

    func testNoAutomaticRefreshAfterExpiry() async throws {
        let harness = try Harness(configure: { $0.expiryMargin = .seconds(10) })
        let updates = await harness.client.stateUpdates(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let callsAfterFederation = harness.fake.calls.count
        harness.clock.advance(by: 7200)
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .expired)
        _ = await harness.client.allStateUpdates()  // subscribing announces the expiry
        try await Task.sleep(for: .milliseconds(300))
        XCTAssertEqual(harness.fake.calls.count, callsAfterFederation, "the library never re-exchanges on its own")
        let again = try await harness.client.session("alice")
        XCTAssertEqual(again.state, .expired)
        XCTAssertNil(again.credentials)
        let states = await collect(5, from: updates, timeout: .milliseconds(300))
        XCTAssertEqual(states, [.notFederated, .federating, .federated, .expired])
    }

    func testObserversAreToldOfExpiryWithoutReading() async throws {
        // Credentials due 50 ms after federation (by the fake clock); the clock then jumps.
        let harness = try Harness(
            configure: { $0.expiryMargin = .seconds(10) },
            fake: FakeCognito(expiration: testEpoch.addingTimeInterval(10.05)))
        let updates = await harness.client.stateUpdates(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 60)
        let states = await collect(4, from: updates)
        XCTAssertEqual(states, [.notFederated, .federating, .federated, .expired])
    }

    func testSubscribingAfterExpiryYieldsExpired() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 7200)
        let updates = await harness.client.stateUpdates(for: "alice")
        let states = await collect(1, from: updates)
        XCTAssertEqual(states, [.expired])
    }

    func testFederatingAgainAfterExpiryMakesTheSessionFederated() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 7200)
        harness.fake.expiration = harness.clock.now.addingTimeInterval(3600)
        try await harness.client.federate(
            token: TestJWT.make(sub: "x", exp: harness.clock.now.addingTimeInterval(600)), provider: .google, session: "alice")
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.expiration, harness.clock.now.addingTimeInterval(3600))
    }

    func testCredentialsAlreadyWithinTheMarginReadAsExpired() async throws {
        let harness = try Harness(fake: FakeCognito(expiration: testEpoch.addingTimeInterval(60)))
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .expired)
        XCTAssertNil(snapshot.credentials)
    }

    // MARK: Observation

    func testStateUpdatesYieldNotFederatedFederatingFederatedInOrder() async throws {
        let harness = try Harness()
        let updates = await harness.client.stateUpdates(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let states = await collect(3, from: updates)
        XCTAssertEqual(states, [.notFederated, .federating, .federated])
    }

    func testStateUpdatesOfOneSessionIgnoreOthers() async throws {
        let harness = try Harness()
        let updates = await harness.client.stateUpdates(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let states = await collect(3, from: updates)
        XCTAssertEqual(states, [.notFederated, .federating, .federated])
    }

    func testAllStateUpdatesCarryEventsOfEverySession() async throws {
        let harness = try Harness()
        let events = await harness.client.allStateUpdates()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        try await harness.client.federateAsGuest(session: "bob")
        try await harness.client.clear(session: "alice")
        let received = await collect(5, from: events)
        XCTAssertEqual(received, [
            SessionEvent(session: "alice", state: .federating),
            SessionEvent(session: "alice", state: .federated),
            SessionEvent(session: "bob", state: .federating),
            SessionEvent(session: "bob", state: .federated),
            SessionEvent(session: "alice", state: .notFederated),
        ])
    }

    func testClearYieldsNotFederatedAndForgetsTheSession() async throws {
        let harness = try Harness()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let updates = await harness.client.stateUpdates(for: "alice")
        try await harness.client.clear(session: "alice")
        let states = await collect(2, from: updates)
        XCTAssertEqual(states, [.federated, .notFederated])
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot, SessionSnapshot(name: "alice", state: .notFederated))
        let names = try await harness.client.sessionNames()
        XCTAssertEqual(names, [])

        // The cached identity went with it: the next federation asks GetId.
        harness.fake.resetRecording()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        XCTAssertEqual(harness.fake.operations, ["GetId", "GetCredentialsForIdentity"])
    }

    func testClearingAMissingSessionSucceedsQuietly() async throws {
        let harness = try Harness()
        try await harness.client.clear(session: "nobody")
        let snapshot = try await harness.client.session("nobody")
        XCTAssertEqual(snapshot.state, .notFederated)
    }

    func testALocalTokenFailurePublishesNothing() async throws {
        let harness = try Harness()
        let events = await harness.client.allStateUpdates()
        await assertThrows(FederationError.self, code: .invalidToken) { try await harness.client.federate(token: "x", provider: .google) }
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "marker")
        let received = await collect(1, from: events)
        XCTAssertEqual(received, [SessionEvent(session: "marker", state: .federating)])
    }
}
