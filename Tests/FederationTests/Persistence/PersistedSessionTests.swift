import BrokerTestSupport
@testable import Federation
import Foundation
import SecureStorage
import Synchronization
import XCTest

/// Sessions saved through a keystore: restored at start-up, cleared durably,
/// never half-written.
final class PersistedSessionTests: XCTestCase {
    private var root: String!
    private let key = [UInt8](repeating: 7, count: 32)

    override func setUpWithError() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("broker-persist-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        root = dir.path
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    private func keystore(_ group: AccessGroup = .none) throws -> FileKeystore {
        try FileKeystore(root: root, service: "broker-tests", accessGroup: group, keySource: .raw(key))
    }

    private func client(
        keystore: any SynchronousKeystore,
        fake: FakeCognito = FakeCognito(expiration: testEpoch.addingTimeInterval(3600)),
        clock: TestClock = TestClock()
    ) throws -> FederationClient {
        try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
            transport: fake.transport,
            persistence: KeystoreSessionPersistence(keystore: keystore),
            environment: [:],
            retryRunner: noSleepRunner(),
            now: clock.function,
            logger: nil
        )
    }

    func testSessionIsRestoredAtStartUp() async throws {
        let token = googleToken(sub: "alice")
        let first = try client(keystore: keystore())
        let result = try await first.federate(token: token, provider: .google, session: "alice")
        try await first.federateAsGuest(session: "visitor")

        let restarted = try client(keystore: keystore())
        let alice = await restarted.session("alice")
        XCTAssertEqual(alice.state, .federated)
        XCTAssertEqual(alice.identityId, result.identityId)
        XCTAssertEqual(alice.provider, .google)
        XCTAssertEqual(alice.credentials, result.credentials)
        let visitor = await restarted.session("visitor")
        XCTAssertTrue(visitor.isGuest)
        XCTAssertEqual(visitor.state, .federated)
        let names = await restarted.sessionNames()
        XCTAssertEqual(names, ["alice", "visitor"])

        // What is saved never includes the provider token.
        let saved = try XCTUnwrap(try keystore().data(forKey: "session.alice"))
        XCTAssertFalse(String(decoding: saved, as: UTF8.self).contains(token))
        XCTAssertFalse(String(decoding: saved, as: UTF8.self).contains("eyJ"), "no JWT fragment is saved")
    }

    func testRestoredSessionPastItsExpirationIsExpired() async throws {
        let first = try client(keystore: keystore())
        try await first.federate(token: googleToken(), provider: .google, session: "alice")

        let later = TestClock(testEpoch.addingTimeInterval(3600 - 60))
        let restarted = try client(keystore: keystore(), clock: later)
        let snapshot = await restarted.session("alice")
        XCTAssertEqual(snapshot.state, .expired, "inside the 120 s margin")
        XCTAssertNil(snapshot.credentials)
        XCTAssertNotNil(snapshot.identityId)
    }

    func testClearRemovesTheSavedSession() async throws {
        let first = try client(keystore: keystore())
        try await first.federate(token: googleToken(), provider: .google, session: "alice")
        try await first.federate(token: googleToken(sub: "bob"), provider: .google, session: "bob")
        try await first.clear(session: "alice")

        XCTAssertEqual(try keystore().keys(), ["session.bob"])
        let restarted = try client(keystore: keystore())
        let alice = await restarted.session("alice")
        XCTAssertEqual(alice.state, .notFederated)
        let bob = await restarted.session("bob")
        XCTAssertEqual(bob.state, .federated)
    }

    func testFailedWriteLeavesMemoryAndDiskAsTheyWere() async throws {
        let store = FailingKeystore(wrapping: try keystore())
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        let client = try client(keystore: store, fake: fake)
        let first = try await client.federate(token: googleToken(), provider: .google, session: "alice")

        store.failWrites(true)
        let updates = await client.stateUpdates(for: "alice")
        fake.expiration = testEpoch.addingTimeInterval(7200)
        await expectFederationError(.storage) {
            try await client.federate(token: googleToken(), provider: .google, session: "alice")
        }
        let snapshot = await client.session("alice")
        XCTAssertEqual(snapshot.state, .federated)
        XCTAssertEqual(snapshot.credentials, first.credentials, "memory keeps the credentials that are on disk")
        let states = await collect(3, from: updates)
        XCTAssertEqual(states, [.federated, .federating, .federated])

        store.failWrites(false)
        let restarted = try self.client(keystore: keystore())
        let restored = await restarted.session("alice")
        XCTAssertEqual(restored.credentials, first.credentials, "disk keeps the last good session")
    }

    func testTamperedSessionFailsStartUpWithAStorageError() async throws {
        let first = try client(keystore: keystore())
        try await first.federate(token: googleToken(), provider: .google, session: "alice")

        let items = try FileManager.default.subpathsOfDirectory(atPath: root).filter { $0.hasSuffix(".item") }
        let item = try XCTUnwrap(items.first, "one sealed item on disk")
        let path = root + "/" + item
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes[bytes.count - 1] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: path))

        let reopened = try keystore()
        do {
            _ = try client(keystore: reopened)
            XCTFail("a tampered session must not be restored")
        } catch let error as FederationError {
            XCTAssertEqual(error.code, .storage)
            XCTAssertEqual(error.keystoreError?.code, .authenticationFailed)
        }
    }

    func testSessionFollowsAnAccessGroupMigration() async throws {
        let first = try client(keystore: keystore(.none))
        let result = try await first.federate(token: googleToken(), provider: .google, session: "alice")

        let migrated = try keystore(AccessGroup(name: "team", migrateItemsOfUserSession: true))
        let restarted = try client(keystore: migrated)
        let snapshot = await restarted.session("alice")
        XCTAssertEqual(snapshot.identityId, result.identityId)
        XCTAssertEqual(snapshot.state, .federated)
    }

    func testWithoutMigrationANewGroupStartsEmptyAndTheOldOneIsKept() async throws {
        let first = try client(keystore: keystore(.none))
        try await first.federate(token: googleToken(), provider: .google, session: "alice")

        let other = try client(keystore: keystore(AccessGroup(name: "team")))
        let names = await other.sessionNames()
        XCTAssertEqual(names, [])
        let back = try client(keystore: keystore(.none))
        let alice = await back.session("alice")
        XCTAssertEqual(alice.state, .federated, "the old group's session was not wiped")
    }
}

/// A keystore whose writes can be made to fail, to test that nothing half-lands.
final class FailingKeystore: SynchronousKeystore {
    private let base: any SynchronousKeystore
    private let failing = Mutex(false)

    init(wrapping base: any SynchronousKeystore) { self.base = base }

    func failWrites(_ value: Bool) { failing.withLock { $0 = value } }

    func data(forKey key: String) throws -> [UInt8]? { try base.data(forKey: key) }
    func set(_ value: [UInt8], forKey key: String) throws {
        if failing.withLock({ $0 }) { throw POSIXError(.ENOSPC) }
        try base.set(value, forKey: key)
    }
    func remove(forKey key: String) throws { try base.remove(forKey: key) }
    func removeAll() throws { try base.removeAll() }
    func keys() throws -> [String] { try base.keys() }
}
