import BrokerTestSupport
@testable import Federation
import Foundation
import InMemoryLogging
import Logging
import SecureStorage
import XCTest

/// Sessions over a shared `SQLiteKeystore`: read on first use, cleared durably, never
/// half-written, shared by every client of the store, and damaged items confined to
/// their own session.
final class PersistedSessionTests: KeystoreRootTestCase {
    private let key = [UInt8](repeating: 7, count: 32)

    private func keystore(_ group: AccessGroup = .none, move: Bool = false) throws -> SQLiteKeystore {
        try SQLiteKeystore(
            root: root, service: "broker-tests", accessGroup: group, keySource: .raw(key),
            configuration: SQLiteKeystore.Configuration(changePollInterval: .milliseconds(20), moveItemsFromPreviousGroup: move))
    }

    /// Replaces the saved item of `session` with one sealed under another key, as someone who
    /// can write the database file could (a process with another key is refused at open).
    private func plantForeignItem(session: String, version: Int64? = nil) throws {
        let ours = try keystore()
        try ours.replaceStoredRow(
            sealing: Array("garbage".utf8), withKey: [UInt8](repeating: 9, count: 32), forKey: "session.\(session)", version: version)
        ours.close()
    }

    private func client(
        keystore: any Keystore,
        fake: FakeCognito = FakeCognito(expiration: testEpoch.addingTimeInterval(3600)),
        clock: TestClock = TestClock(),
        cacheCapacity: Int = FederationConfiguration.defaultSessionCacheCapacity,
        logger: Logger? = nil
    ) throws -> FederationClient {
        var configuration = FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint)
        configuration.sessionCacheCapacity = cacheCapacity
        return try FederationClient(
            configuration: configuration,
            transport: fake.transport,
            keystore: keystore,
            environment: [:],
            retryRunner: noSleepRunner(),
            now: clock.function,
            logger: logger
        )
    }

    // MARK: Persistence

    func testSessionIsReadAfterARestart() async throws {
        let token = TestJWT.valid(sub: "alice")
        let first = try client(keystore: keystore())
        let result = try await first.federate(token: token, provider: .google, session: "alice")
        try await first.federateAsGuest(session: "visitor")

        let restarted = try client(keystore: keystore())
        let alice = try await restarted.session("alice")
        XCTAssertEqual(alice.state, .federated)
        XCTAssertEqual(alice.identityId, result.identityId)
        XCTAssertEqual(alice.provider, .google)
        XCTAssertEqual(alice.credentials, result.credentials)
        let visitor = try await restarted.session("visitor")
        XCTAssertTrue(visitor.isGuest)
        XCTAssertEqual(visitor.state, .federated)
        let names = try await restarted.sessionNames()
        XCTAssertEqual(names, ["alice", "visitor"])

        // What is saved never includes the provider token, and the file holds only ciphertext.
        let value = try await keystore().value(forKey: "session.alice")
        let saved = try XCTUnwrap(value)
        XCTAssertFalse(String(decoding: saved, as: UTF8.self).contains(token))
        XCTAssertFalse(String(decoding: saved, as: UTF8.self).contains("eyJ"), "no JWT fragment is saved")
        for file in try FileManager.default.subpathsOfDirectory(atPath: root) {
            guard let data = FileManager.default.contents(atPath: root + "/" + file) else { continue }
            XCTAssertNil(leakedRun(in: String(decoding: data, as: UTF8.self), of: [FakeCognito.secretKey, FakeCognito.sessionToken]), file)
        }
    }

    func testCreatingAClientReadsNothingAndAReadLoadsOnlyThatSession() async throws {
        let writer = try client(keystore: keystore())
        for index in 0..<50 {
            try await writer.federate(token: TestJWT.valid(sub: "u\(index)"), provider: .google, session: "u\(index)")
        }
        let spy = ScriptableKeystore(wrapping: try keystore())
        let reader = try client(keystore: spy)
        XCTAssertEqual(spy.counts, ScriptableKeystore.Counts(), "start-up reads no saved session")
        let snapshot = try await reader.session("u7")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(spy.counts.reads, 1)
        _ = try await reader.session("u7")
        XCTAssertEqual(spy.counts.reads, 1, "the second read is served from the cache")
    }

    func testTheCacheIsBoundedAndEvictedSessionsAreReadAgain() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(keystore: spy, cacheCapacity: 4)
        for index in 0..<10 {
            try await client.federate(token: TestJWT.valid(sub: "u\(index)"), provider: .google, session: "u\(index)")
        }
        // Only reads of the session's own key count: the change feed reloads cached sessions
        // this client just wrote, concurrently. Those reloads are let settle first, so none
        // of u9's can land between the two counts below.
        var counts = spy.counts
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(5) {
            try await Task.sleep(for: .milliseconds(200))
            let now = spy.counts
            if now == counts { break }
            counts = now
        }
        let u0Before = spy.counts.reads(of: "session.u0")
        let oldest = try await client.session("u0")
        XCTAssertEqual(oldest.state, .federated)
        XCTAssertEqual(spy.counts.reads(of: "session.u0"), u0Before + 1, "u0 was evicted and read again")
        let u9Before = spy.counts.reads(of: "session.u9")
        _ = try await client.session("u9")
        XCTAssertEqual(spy.counts.reads(of: "session.u9"), u9Before, "u9 is among the 4 most recent")
    }

    func testAnExpiredSavedSessionReadsExpired() async throws {
        let first = try client(keystore: keystore())
        try await first.federate(token: TestJWT.valid(), provider: .google, session: "alice")

        let later = TestClock(testEpoch.addingTimeInterval(3600 - 60))
        let restarted = try client(keystore: keystore(), clock: later)
        let snapshot = try await restarted.session("alice")
        XCTAssertEqual(snapshot.state, .expired, "inside the 120 s margin")
        XCTAssertNil(snapshot.credentials)
        XCTAssertNotNil(snapshot.identityId)
        await assertThrows(FederationError.self, code: .noValidCredentials) { try await restarted.credentials(for: "alice") }
    }

    func testClearRemovesTheSavedSession() async throws {
        let first = try client(keystore: keystore())
        try await first.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        try await first.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "bob")
        try await first.clear(session: "alice")

        let keys = try await keystore().keys()
        XCTAssertEqual(keys, ["session.bob"])
        let restarted = try client(keystore: keystore())
        let alice = try await restarted.session("alice")
        XCTAssertEqual(alice.state, .notFederated)
        let bob = try await restarted.session("bob")
        XCTAssertEqual(bob.state, .federated)
    }

    func testCredentialsForASession() async throws {
        let harness = try client(keystore: keystore())
        await assertThrows(FederationError.self, code: .noValidCredentials) { try await harness.credentials(for: "alice") }
        let result = try await harness.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let credentials = try await harness.credentials(for: "alice")
        XCTAssertEqual(credentials, result.credentials)
    }

    func testAClientWithoutAConfigurationReadsAndClearsButNeverFederates() async throws {
        // The reader runs on the real clock: so do the writer's credentials.
        let writer = try client(keystore: keystore(), fake: FakeCognito(expiration: Date().addingTimeInterval(3600)), clock: TestClock(Date()))
        let jwt = TestJWT.make(sub: "alice", exp: Date().addingTimeInterval(3600), iss: "https://accounts.google.com")
        let result = try await writer.federate(token: jwt, provider: .google, session: "alice")
        let reader = FederationClient(keystore: try keystore())
        XCTAssertNil(reader.configuration)
        let snapshot = try await reader.session("alice")
        XCTAssertEqual(snapshot.credentials, result.credentials)
        await assertThrows(FederationError.self, code: .invalidConfiguration) {
            try await reader.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        await assertThrows(FederationError.self, code: .invalidConfiguration) { try await reader.federateAsGuest(session: "g") }
        try await reader.clear(session: "alice")
        let cleared = await eventually { (try? await writer.session("alice").state) == .notFederated }
        XCTAssertTrue(cleared, "the writer sees the reader's clear through the change feed")
    }

    // MARK: Failures

    func testFailedWriteLeavesTheSessionAsItWas() async throws {
        let store = ScriptableKeystore(wrapping: try keystore())
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        let client = try client(keystore: store, fake: fake)
        let first = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")

        store.setFailWrites(true)
        let updates = await client.stateUpdates(for: "alice")
        fake.expiration = testEpoch.addingTimeInterval(7200)
        let error = await assertThrows(FederationError.self, code: .storage) {
            try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        XCTAssertEqual(error?.keystoreError?.code, .storeUnavailable)
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.credentials, first.credentials, "the cache keeps the credentials that are stored")
        let states = await collect(3, from: updates)
        XCTAssertEqual(states, [.federated, .federating, .federated])

        store.setFailWrites(false)
        let restarted = try self.client(keystore: keystore())
        let restored = try await restarted.session("alice")
        XCTAssertEqual(restored.credentials, first.credentials, "the store keeps the last good session")
    }

    /// The service says the identity is gone, but the store refuses the `terminated` record:
    /// the caller hears both, and the session reads what the store holds (what every other
    /// client reads) instead of a `terminated` that lives in one cache only.
    func testATerminationThatCannotBeSavedKeepsTheStoredSession() async throws {
        let store = ScriptableKeystore(wrapping: try keystore())
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        let client = try client(keystore: store, fake: fake)
        let options = FederationOptions(developerProvidedIdentityId: "us-east-1:gone")
        let first = try await client.federate(token: "opaque-dev-token", provider: .developer, options: options, session: "dev")

        store.setFailWrites(true)
        fake.enqueue(.error("ResourceNotFoundException", message: "Identity 'us-east-1:gone' not found."), for: .getCredentialsForIdentity)
        let error = await assertThrows(FederationError.self, code: .identityTerminated) {
            try await client.federate(token: "opaque-dev-token", provider: .developer, options: options, session: "dev")
        }
        XCTAssertEqual(error?.keystoreError?.code, .storeUnavailable)
        XCTAssertTrue(error?.message.contains("could not be marked terminated") ?? false, error?.message ?? "")
        let snapshot = try await client.session("dev")
        XCTAssertEqual(snapshot.state, .federated, "the cache holds what the store holds")
        XCTAssertEqual(snapshot.credentials, first.credentials)

        // Once the store takes writes, the next attempt hears the same and makes it stick.
        store.setFailWrites(false)
        fake.enqueue(.error("ResourceNotFoundException", message: "Identity 'us-east-1:gone' not found."), for: .getCredentialsForIdentity)
        let saved = await assertThrows(FederationError.self, code: .identityTerminated) {
            try await client.federate(token: "opaque-dev-token", provider: .developer, options: options, session: "dev")
        }
        XCTAssertNil(saved?.keystoreError)
        let other = FederationClient(keystore: try keystore())
        let seen = try await other.session("dev")
        XCTAssertEqual(seen.state, .terminated, "another client of the store reads the termination")
    }

    /// Store unreachable: federate fails with a storage error and the session stays;
    /// cached valid credentials are still served; recovery needs no restart.
    func testAnUnreachableStoreFailsFederationsButServesCachedCredentialsAndRecovers() async throws {
        let store = ScriptableKeystore(wrapping: try keystore())
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        let client = try client(keystore: store, fake: fake)
        let first = try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")

        store.setUnreachable(true)
        await assertThrows(FederationError.self, code: .storage) {
            try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        await assertThrows(FederationError.self, code: .storage) {
            try await client.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "bob")
        }
        let cached = try await client.credentials(for: "alice")
        XCTAssertEqual(cached, first.credentials, "cached valid credentials are served while the store is down")
        await assertThrows(FederationError.self, code: .storage) { try await client.session("carol") }

        store.setUnreachable(false)
        fake.expiration = testEpoch.addingTimeInterval(7200)
        let second = try await client.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "bob")
        let bob = try await client.credentials(for: "bob")
        XCTAssertEqual(bob, second.credentials, "the same client works again once the store is back")
    }

    /// One damaged item (tampered, or sealed with another key) fails its own session
    /// only; a new federation or a clear replaces it, and the replacement is a warning (on a
    /// fleet instance with the wrong key it overwrites what the others could open).
    func testADamagedItemAffectsOnlyItsSession() async throws {
        let writer = try client(keystore: keystore())
        try await writer.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        try await writer.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "bob")
        // Alice's item sealed under another key stands in for a tampered one.
        try plantForeignItem(session: "alice")

        let logs = InMemoryLogHandler()
        let reader = try client(keystore: keystore(), logger: Logger(label: "damaged", factory: { _ in logs }))
        let error = await assertThrows(FederationError.self, code: .storage) { try await reader.session("alice") }
        XCTAssertEqual(error?.keystoreError?.code, .authenticationFailed)
        let bob = try await reader.session("bob")
        XCTAssertEqual(bob.state, .federated, "other sessions keep working")

        try await reader.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let alice = try await reader.session("alice")
        XCTAssertEqual(alice.state, .federated, "a new federation replaces the damaged item")
        let replaced = logs.entries.filter { $0.message == "saved session unreadable; the federation replaces it" }
        XCTAssertEqual(replaced.map(\.level), [.warning])
        XCTAssertEqual(replaced.first?.metadata["broker.session"], "alice")
    }

    /// A federation whose save loses to an item this client cannot open (damaged, or another
    /// key's, at a higher version) stores nothing: it fails with `.storage` rather than
    /// return credentials the session does not hold, and the session still reads as damaged.
    func testAFederationThatLosesToAnUnreadableItemFailsAndStoresNothing() async throws {
        try plantForeignItem(session: "alice", version: .max - 1)
        let reader = try client(keystore: keystore())
        let error = await assertThrows(FederationError.self, code: .storage) {
            try await reader.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        XCTAssertEqual(error?.keystoreError?.code, .authenticationFailed)
        XCTAssertTrue(error?.message.contains("was not saved") ?? false, "\(String(describing: error))")
        let again = await assertThrows(FederationError.self, code: .storage) { try await self.client(keystore: self.keystore()).session("alice") }
        XCTAssertEqual(again?.keystoreError?.code, .authenticationFailed)
        // Clearing removes it; the next federation is stored.
        try await reader.clear(session: "alice")
        try await reader.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let stored = try await client(keystore: keystore()).session("alice")
        XCTAssertEqual(stored.state, .federated)
    }

    /// A federation over an item that does not open, which fails (the service refuses the
    /// token): the session still reads as what it is, an unreadable item (`.storage`), not as
    /// `notFederated`, here and for a new client.
    func testAFailedFederationOverAnUnreadableItemLeavesItReadAsSuch() async throws {
        try plantForeignItem(session: "alice")
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        fake.enqueue(.error("NotAuthorizedException", message: "Invalid login token."), for: .getId)
        let reader = try client(keystore: keystore(), fake: fake)
        await assertThrows(FederationError.self, code: .notAuthorized) {
            try await reader.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        }
        let error = await assertThrows(FederationError.self, code: .storage) { try await reader.session("alice") }
        XCTAssertEqual(error?.keystoreError?.code, .authenticationFailed)
        // The next federation still replaces it.
        try await reader.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let alice = try await reader.session("alice")
        XCTAssertEqual(alice.state, .federated)
    }

    // MARK: One-shot reads

    /// `FederationClient.savedSession` over a `SingleReader` reports what a client's
    /// `session(_:)` reports, state by state, and fails a damaged item the same way.
    func testASingleReadReportsWhatTheClientReports() async throws {
        let clock = TestClock()
        let writer = try client(keystore: keystore(), clock: clock)
        try await writer.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        try await writer.federateAsGuest(session: "visitor")
        try await writer.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "bob")
        try plantForeignItem(session: "bob")

        let single = try XCTUnwrap(try SQLiteKeystore.SingleReader.open(root: root, service: "broker-tests", keySource: .raw(key)))
        defer { single.close() }
        let read = { (key: String) throws(KeystoreError) -> [UInt8]? in try single.value(forKey: key) }
        // Federated; then past the expiry margin (expired, credentials withheld); never saved.
        for advance: TimeInterval in [0, 3500] {
            clock.advance(by: advance)
            let reader = try client(keystore: keystore(), clock: clock)
            for name in ["alice", "visitor", "nobody"] {
                let expected = try await reader.session(name)
                let snapshot = try FederationClient.savedSession(
                    name, expiryMargin: .seconds(120), now: clock.now, reading: read)
                XCTAssertEqual(snapshot, expected, "\(name) after \(advance) s")
            }
            let full = await assertThrows(FederationError.self, code: .storage) { try await reader.session("bob") }
            let once = assertThrows(FederationError.self, code: .storage) {
                try FederationClient.savedSession("bob", now: clock.now, reading: read)
            }
            XCTAssertEqual(once?.message, full?.message)
            XCTAssertEqual(once?.keystoreError?.code, .authenticationFailed)
        }
        assertThrows(FederationError.self, code: .invalidConfiguration) {
            try FederationClient.savedSession("", reading: read)
        }
    }

    // MARK: Access groups

    func testSessionFollowsAnAccessGroupMigration() async throws {
        let first = try client(keystore: keystore(.none))
        let result = try await first.federate(token: TestJWT.valid(), provider: .google, session: "alice")

        let restarted = try client(keystore: keystore(AccessGroup(name: "team"), move: true))
        let snapshot = try await restarted.session("alice")
        XCTAssertEqual(snapshot.identityId, result.identityId)
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testWithoutMigrationANewGroupStartsEmptyAndTheOldOneIsKept() async throws {
        let first = try client(keystore: keystore(.none))
        try await first.federate(token: TestJWT.valid(), provider: .google, session: "alice")

        let other = try client(keystore: keystore(AccessGroup(name: "team")))
        let names = try await other.sessionNames()
        XCTAssertEqual(names, [])
        let back = try client(keystore: keystore(.none))
        let alice = try await back.session("alice")
        XCTAssertEqual(alice.state, .federated, "the old group's session was not wiped")
    }
}
