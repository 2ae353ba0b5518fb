import BrokerTestSupport
@testable import Federation
import Foundation
import SecureStorage
import XCTest

/// Several clients over one SQLite store, as several server instances would be: each
/// sees the others' federations and clears, reports them on its state streams, and
/// concurrent federations of one session converge on the later expiration.
final class SharedStoreTests: KeystoreRootTestCase {
    private let key = [UInt8](repeating: 3, count: 32)

    /// A client on its own `SQLiteKeystore` instance, as another process would have.
    private func instance(
        fake: FakeCognito = FakeCognito(expiration: Date().addingTimeInterval(3600)), changePollInterval: Duration = .milliseconds(20)
    ) throws -> FederationClient {
        let keystore = try SQLiteKeystore(
            root: root, service: "shared-tests", keySource: .raw(key),
            configuration: SQLiteKeystore.Configuration(changePollInterval: changePollInterval))
        return try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
            transport: fake.transport, keystore: keystore, environment: [:], retryRunner: noSleepRunner(),
            now: { Date() }, logger: nil)
    }

    func testAFederationOnOneIsReadableOnTheOtherAndAClearOnTheOtherReachesTheFirst() async throws {
        let a = try instance()
        let b = try instance()
        let before = try await b.session("alice")
        XCTAssertEqual(before.state, .notFederated)

        let result = try await a.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let seen = await eventually { (try? await b.session("alice").credentials) == result.credentials }
        XCTAssertTrue(seen, "B reads A's federation (B had alice cached as notFederated: the feed updated it)")

        try await b.clear(session: "alice")
        let cleared = await eventually { (try? await a.session("alice").state) == .notFederated }
        XCTAssertTrue(cleared, "A reads notFederated after B's clear")
    }

    func testStateStreamsReportChangesMadeByOtherClients() async throws {
        let a = try instance()
        let b = try instance()
        let perSession = await b.stateUpdates(for: "alice")
        let all = await b.allStateUpdates()
        var sessionStates = perSession.makeAsyncIterator()
        var events = all.makeAsyncIterator()
        let initial = await sessionStates.next()
        XCTAssertEqual(initial, .notFederated)

        // A feed reports the state when it reads it, so each change is awaited before the
        // next (changes made faster than the poll interval may be seen as the last one only).
        try await a.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let federated = await sessionStates.next()
        XCTAssertEqual(federated, .federated, "B's stream for alice saw A's federation")
        let firstEvent = await events.next()
        XCTAssertEqual(firstEvent, SessionEvent(session: "alice", state: .federated))

        try await a.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "bob")
        let bobEvent = await events.next()
        XCTAssertEqual(bobEvent, SessionEvent(session: "bob", state: .federated), "a session B never read is reported to B's all-sessions stream")

        try await a.clear(session: "alice")
        let cleared = await sessionStates.next()
        XCTAssertEqual(cleared, .notFederated, "B's stream for alice saw A's clear")
        let clearEvent = await events.next()
        XCTAssertEqual(clearEvent, SessionEvent(session: "alice", state: .notFederated))
    }

    /// Two clients federate one session at once; both succeed, and both (and the store)
    /// end on the record with the later expiration, whichever committed last.
    func testConcurrentFederationsConvergeOnTheLaterExpiration() async throws {
        let later = Date().addingTimeInterval(7200)
        let earlier = Date().addingTimeInterval(3600)
        for laterCommitsFirst in [true, false] {
            let session = laterCommitsFirst ? "first" : "second"
            let slow = FakeCognito(expiration: laterCommitsFirst ? earlier : later)
            slow.responseDelay = .milliseconds(300)
            let fast = FakeCognito(expiration: laterCommitsFirst ? later : earlier)
            let a = try instance(fake: slow)
            let b = try instance(fake: fast)
            let jwt = TestJWT.valid(sub: "alice")
            async let one = a.federate(token: jwt, provider: .google, session: session)
            async let two = b.federate(token: jwt, provider: .google, session: session)
            _ = try await (one, two)
            for client in [a, b] {
                let converged = await eventually {
                    let expiration = try? await client.session(session).expiration
                    return expiration.map { abs($0.timeIntervalSince(later)) < 1 } ?? false
                }
                XCTAssertTrue(converged, "\(session): every client holds the later expiration")
            }
            let fresh = try instance()
            let stored = try await fresh.session(session)
            XCTAssertEqual(stored.expiration.map { abs($0.timeIntervalSince(later)) < 1 }, true, "the store holds the later one")
        }
    }

    /// A guest never replaces a login, whichever client saves it: a guest call on B that
    /// commits after A's login, with a later expiration, loses, and says so.
    func testAGuestCallOnOneClientNeverReplacesALoginAnotherSavedMeanwhile() async throws {
        let guestFake = FakeCognito(expiration: Date().addingTimeInterval(7200))
        guestFake.responseDelay = .milliseconds(300)
        let guestClient = try instance(fake: guestFake)
        let loginClient = try instance(fake: FakeCognito(expiration: Date().addingTimeInterval(3600)))
        let guest = Task { try await guestClient.federateAsGuest(session: "shared") }
        let started = await eventually { guestFake.calls.count >= 1 }
        XCTAssertTrue(started)
        let login = try await loginClient.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "shared")
        await assertThrows(FederationError.self, code: .sessionConflict) { _ = try await guest.value }

        let stored = try await instance().session("shared")
        XCTAssertEqual(stored.provider, .google, "the guest replaced the login")
        XCTAssertEqual(stored.credentials, login.credentials)
        let held = await eventually { (try? await guestClient.session("shared").provider) == .google }
        XCTAssertTrue(held, "the guest's client holds the login the store holds")
        // A login still replaces a guest (linking), whatever the expirations.
        let linkingFake = FakeCognito(expiration: Date().addingTimeInterval(1800))
        let linking = try instance(fake: linkingFake)
        let other = try instance(fake: FakeCognito(expiration: Date().addingTimeInterval(7200)))
        try await other.federateAsGuest(session: "linked")
        try await linking.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "linked")
        let linked = try await instance().session("linked")
        XCTAssertEqual(linked.provider, .google)
    }

    /// A federation that loses its commit to a terminated record another client saved
    /// meanwhile reports the session terminated rather than credentials it contradicts.
    func testAFederationThatLostToATerminatedRecordSaysSo() async throws {
        let slowFake = FakeCognito(expiration: Date().addingTimeInterval(3600))
        slowFake.responseDelay = .milliseconds(300)
        let slow = try instance(fake: slowFake)
        let goneFake = FakeCognito(expiration: Date().addingTimeInterval(3600))
        let gone = try instance(fake: goneFake)
        // The session's own identity (one the caller names for the first time terminates nothing).
        try await gone.federate(
            token: "opaque-dev-token", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:gone"), session: "s")
        goneFake.enqueue(.error("ResourceNotFoundException", message: "Identity 'us-east-1:gone' not found."), for: .getCredentialsForIdentity)
        let federation = Task { try await slow.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "s") }
        let started = await eventually { slowFake.calls.count >= 1 }
        XCTAssertTrue(started)
        await assertThrows(FederationError.self, code: .identityTerminated) {
            try await gone.federate(
                token: "opaque-dev-token", provider: .developer,
                options: FederationOptions(developerProvidedIdentityId: "us-east-1:gone"), session: "s")
        }
        await assertThrows(FederationError.self, code: .identityTerminated) { _ = try await federation.value }
        let state = try await slow.session("s").state
        XCTAssertEqual(state, .terminated)
    }

    /// Whether a gone identity the caller named is the session's is the store's to say: a
    /// client whose cache lags (here, a change feed that polls hourly) still holds the old
    /// identity, which another client has since replaced; its gone answer must not overwrite
    /// the other client's valid federation with `terminated`.
    func testAGoneIdentityOnlyTheLaggingCacheStillHoldsTerminatesNothing() async throws {
        let lagFake = FakeCognito(expiration: Date().addingTimeInterval(3600))
        let lagging = try instance(fake: lagFake, changePollInterval: .seconds(3600))
        let current = try instance(fake: FakeCognito(expiration: Date().addingTimeInterval(7200)))
        let old = FederationOptions(developerProvidedIdentityId: "us-east-1:old")
        try await lagging.federate(token: "opaque-dev-token", provider: .developer, options: old, session: "s")
        let replaced = try await current.federate(
            token: "opaque-dev-token", provider: .developer, options: FederationOptions(developerProvidedIdentityId: "us-east-1:new"), session: "s")
        let stale = try await lagging.session("s")
        XCTAssertEqual(stale.identityId, "us-east-1:old", "the lagging client's cache did not lag")
        lagFake.enqueue(.error("ResourceNotFoundException", message: "Identity 'us-east-1:old' not found."), for: .getCredentialsForIdentity)
        let error = await assertThrows(FederationError.self) {
            try await lagging.federate(token: "opaque-dev-token", provider: .developer, options: old, session: "s")
        }
        XCTAssertEqual(error?.code, .resourceNotFound, "\(String(describing: error))")
        let stored = try await instance().session("s")
        XCTAssertEqual(stored.state, .federated)
        XCTAssertEqual(stored.credentials, replaced.credentials)
    }

    /// An observer of every session hears of a clear by another client of a session its own
    /// client never read (an entry made from nothing would announce nothing).
    func testAClearOfASessionThisClientNeverReadReachesItsObserversOfEverySession() async throws {
        let a = try instance()
        let b = try instance()
        try await a.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let all = await b.allStateUpdates()
        try await a.clear(session: "alice")
        let events = await collect(10, from: all, timeout: .seconds(3))
        XCTAssertEqual(events.last, SessionEvent(session: "alice", state: .notFederated), "B's stream of every session never heard that alice is gone: \(events)")
    }

    /// Federations of different sessions run concurrently and share commits.
    func testManyConcurrentFederationsAllLand() async throws {
        let a = try instance()
        let tokens = (0..<64).map { TestJWT.valid(sub: "u\($0)") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, jwt) in tokens.enumerated() {
                group.addTask { try await a.federate(token: jwt, provider: .google, session: "u\(index)") }
            }
            try await group.waitForAll()
        }
        let b = try instance()
        let names = try await b.sessionNames()
        XCTAssertEqual(names.count, 64)
    }
}
