import BrokerTestSupport
@testable import Federation
import Foundation
import PostgresKeystore
import SecureStorage
import XCTest

/// A fleet: several `FederationClient`s, each on its own `PostgresKeystore` instance as on
/// its own host, sharing one database (the PostgreSQL version of `SharedStoreTests`).
final class PostgresFleetTests: PostgresTestCase, @unchecked Sendable {
    private let poolId = "us-east-1:11111111-2222-3333-4444-555555555555"
    private let endpoint = "https://cognito-identity.test.invalid/"

    override func tearDown() async throws {
        try? server.startServer()
        try await super.tearDown()
    }

    /// A client on its own keystore instance.
    private func instance(fake: FakeCognito = FakeCognito(expiration: Date().addingTimeInterval(3600))) async throws -> FederationClient {
        let keystore = try await keystore(service: "fleet-tests")
        return try FederationClient(
            configuration: FederationConfiguration(identityPoolId: poolId, endpoint: endpoint),
            transport: fake.transport, keystore: keystore, environment: [:],
            retryRunner: RetryRunner(policy: .standard, quota: RetryQuota(policy: .standard), sleep: { _ in }, random: { 0 }),
            now: { Date() }, logger: nil)
    }

    private func token(_ sub: String = "alice") -> String {
        TestJWT.make(sub: sub, exp: Date().addingTimeInterval(3600), iss: "https://accounts.google.com")
    }

    func testAFederationOnAIsReadableOnBAndAClearOnBReachesA() async throws {
        let a = try await instance()
        let b = try await instance()
        let before = try await b.session("alice")
        XCTAssertEqual(before.state, .notFederated)

        let result = try await a.federate(token: token(), provider: .google, session: "alice")
        let seen = await eventually { (try? await b.session("alice").credentials) == result.credentials }
        XCTAssertTrue(seen, "B reads A's federation (B had alice cached as notFederated: the feed updated it)")

        try await b.clear(session: "alice")
        let cleared = await eventually { (try? await a.session("alice").state) == .notFederated }
        XCTAssertTrue(cleared, "A reads notFederated after B's clear")
    }

    func testStreamsOfEachReportTheOthersChangesWithinASecond() async throws {
        let a = try await instance()
        let b = try await instance()
        let watchdog = streamWatchdog(a, b)
        defer { watchdog.cancel() }
        var bStates = await b.stateUpdates(for: "alice").makeAsyncIterator()
        var aEvents = await a.allStateUpdates().makeAsyncIterator()
        let initial = await bStates.next()
        XCTAssertEqual(initial, .notFederated)
        let listening = await everyKeystoreListens()
        XCTAssertTrue(listening, "both feeds listen before the first change")

        // From the commit (the federation's return), not from the call: what is measured is
        // how long a change takes to reach the others, not the federation's own work.
        try await a.federate(token: token(), provider: .google, session: "alice")
        let started = ContinuousClock.now
        let federated = await bStates.next()
        XCTAssertEqual(federated, .federated, "B's stream saw A's federation")
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(1))

        let ownEvent = await nextSettled(&aEvents)
        XCTAssertEqual(ownEvent, SessionEvent(session: "alice", state: .federated))
        try await b.federate(token: token("bob"), provider: .google, session: "bob")
        let clearStarted = ContinuousClock.now
        let bobEvent = await nextSettled(&aEvents)
        XCTAssertEqual(bobEvent, SessionEvent(session: "bob", state: .federated), "A's all-sessions stream saw B's federation")
        XCTAssertLessThan(ContinuousClock.now - clearStarted, .seconds(1))

        try await b.clear(session: "alice")
        let cleared = await bStates.next()
        XCTAssertEqual(cleared, .notFederated)
        let clearEvent = await nextSettled(&aEvents)
        XCTAssertEqual(clearEvent, SessionEvent(session: "alice", state: .notFederated), "A's stream saw B's clear")
    }

    /// The next event that is not a federation in flight (a client reports its own
    /// `federating` before the outcome).
    private func nextSettled(_ events: inout AsyncStream<SessionEvent>.Iterator) async -> SessionEvent? {
        while let event = await events.next() {
            if event.state != .federating { return event }
        }
        return nil
    }

    func testConcurrentFederationsConvergeOnTheLaterExpiration() async throws {
        let later = Date().addingTimeInterval(7200)
        let earlier = Date().addingTimeInterval(3600)
        for laterCommitsFirst in [true, false] {
            let session = laterCommitsFirst ? "first" : "second"
            let slow = FakeCognito(expiration: laterCommitsFirst ? earlier : later)
            slow.responseDelay = .milliseconds(300)
            let fast = FakeCognito(expiration: laterCommitsFirst ? later : earlier)
            let a = try await instance(fake: slow)
            let b = try await instance(fake: fast)
            let jwt = token()
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
            let fresh = try await instance()
            let stored = try await fresh.session(session)
            XCTAssertEqual(stored.expiration.map { abs($0.timeIntervalSince(later)) < 1 }, true, "the store holds the later one")
        }
    }

    func testDatabaseOutageFailsFederationsServesCachedCredentialsAndRecovers() async throws {
        let a = try await instance()
        let result = try await a.federate(token: token(), provider: .google, session: "alice")
        try server.stopServer()

        do {
            try await a.federate(token: token("bob"), provider: .google, session: "bob")
            XCTFail("a federation cannot be saved while the database is down")
        } catch {
            XCTAssertEqual(error.code, .storage)
            XCTAssertEqual(error.keystoreError?.code, .storeUnavailable)
        }
        let cached = try await a.credentials(for: "alice")
        XCTAssertEqual(cached, result.credentials, "cached valid credentials are still served")
        let alice = try await a.session("alice")
        XCTAssertEqual(alice.state, .federated, "the session stays intact")

        try server.startServer()
        let recovered = await eventually(timeout: .seconds(20)) {
            (try? await a.federate(token: self.token("bob"), provider: .google, session: "bob")) != nil
        }
        XCTAssertTrue(recovered, "federations succeed again once the database is back, without a restart")
        let b = try await instance()
        let bob = try await b.session("bob")
        XCTAssertEqual(bob.state, .federated)
    }
}
