import BrokerTestSupport
import Foundation
import PostgresKeystore
import SecureStorage
import XCTest

/// `PostgresKeystore.migrate` moves a service's items between access groups in one
/// transaction, or nothing at all.
final class PostgresMigrationTests: PostgresTestCase, @unchecked Sendable {
    func testMigrationMovesEveryItemResealedForTheTarget() async throws {
        let source = try await keystore(group: .none)
        try await source.set(Array("alice".utf8), forKey: "session.alice", version: 3)
        try await source.set(Array("bob".utf8), forKey: "session.bob")
        let target = try await keystore(group: AccessGroup(name: "team"))
        let watcher = target.changes()
        let listening = await eventually { target.isListeningForChanges }
        XCTAssertTrue(listening, "the target's feed listens before the migration commits")

        let moved = try await PostgresKeystore.migrate(
            configuration: configuration(), service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: .raw(key))
        XCTAssertEqual(moved, 2)
        let alice = try await target.value(forKey: "session.alice")
        XCTAssertEqual(alice, Array("alice".utf8))
        let sourceKeys = try await source.keys()
        XCTAssertEqual(sourceKeys, [])
        let targetKeys = try await target.keys()
        XCTAssertEqual(targetKeys, ["session.alice", "session.bob"])
        let version = try server.psqlValue("SELECT version FROM identity_broker_items WHERE access_group = 'team' AND key = 'session.alice'", database: database)
        XCTAssertEqual(version, "3", "versions are kept")
        let seen = await collectChanges(watcher, within: 10) { $0.isSuperset(of: [.item("session.alice"), .item("session.bob")]) }
        XCTAssertTrue(seen.isSuperset(of: [.item("session.alice"), .item("session.bob")]), "the target's feed reports the moved items: \(seen)")

        let again = try await PostgresKeystore.migrate(
            configuration: configuration(), service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: .raw(key))
        XCTAssertEqual(again, 0, "rerunning it is harmless")
    }

    /// Keys PostgreSQL holds apart but Swift's `String` equality takes for one ("é"
    /// precomposed and decomposed) both move, each with its own value.
    func testCanonicallyEquivalentKeysMoveAsTwoItems() async throws {
        let source = try await keystore(group: .none)
        let composed = "k\u{E9}", decomposed = "ke\u{301}"
        try await source.set(Array("composed".utf8), forKey: composed)
        try await source.set(Array("decomposed".utf8), forKey: decomposed)
        let moved = try await PostgresKeystore.migrate(
            configuration: configuration(), service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: .raw(key))
        XCTAssertEqual(moved, 2)
        let target = try await keystore(group: AccessGroup(name: "team"))
        let first = try await target.value(forKey: composed)
        XCTAssertEqual(first, Array("composed".utf8))
        let second = try await target.value(forKey: decomposed)
        XCTAssertEqual(second, Array("decomposed".utf8))
    }

    /// Two groups whose names `String` takes for one ("é" precomposed and decomposed) are two
    /// namespaces: a migration between them moves the items.
    func testAMigrationBetweenCanonicallyEquivalentGroupNamesMoves() async throws {
        let composed = AccessGroup(name: "caf\u{E9}"), decomposed = AccessGroup(name: "cafe\u{301}")
        let source = try await keystore(group: composed)
        try await source.set(Array("value".utf8), forKey: "k")
        let moved = try await PostgresKeystore.migrate(
            configuration: configuration(), service: "tool", from: composed, to: decomposed, keySource: .raw(key))
        XCTAssertEqual(moved, 1)
        let target = try await keystore(group: decomposed)
        let value = try await target.value(forKey: "k")
        XCTAssertEqual(value, Array("value".utf8))
    }

    func testAWrongKeyOrADamagedItemMovesNothing() async throws {
        let source = try await keystore(group: .none)
        for index in 0..<3 { try await source.set([UInt8(index)], forKey: "k\(index)") }

        let wrongKey = await keystoreError {
            try await PostgresKeystore.migrate(
                configuration: self.configuration(), service: "tool", from: .none, to: AccessGroup(name: "team"),
                keySource: .raw([UInt8](repeating: 1, count: 32)))
        }
        XCTAssertEqual(wrongKey?.code, .invalidKey, "the source group's key check refuses the key")
        let claimed = try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE service = '' AND access_group = 'team'", database: database)
        XCTAssertEqual(claimed, "0", "a refused key claims no target group")

        try server.psql("UPDATE identity_broker_items SET value = set_byte(value, 15, get_byte(value, 15) # 1) WHERE key = 'k1'", database: database)
        let damaged = await keystoreError {
            try await PostgresKeystore.migrate(
                configuration: self.configuration(), service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: .raw(self.key))
        }
        XCTAssertEqual(damaged?.code, .authenticationFailed)
        XCTAssertTrue(damaged?.reason.contains("1 of 3") ?? false, "\(String(describing: damaged))")

        let remaining = try await source.keys()
        XCTAssertEqual(remaining, ["k0", "k1", "k2"], "the source keeps every item")
        let target = try server.psqlValue(
            "SELECT count(*) FROM identity_broker_items WHERE access_group = 'team' AND service <> ''", database: database)
        XCTAssertEqual(target, "0", "nothing reached the target")
    }

    func testANewerTargetItemWins() async throws {
        let source = try await keystore(group: .none)
        let target = try await keystore(group: AccessGroup(name: "team"))
        try await source.set(Array("old".utf8), forKey: "k", version: 1)
        try await target.set(Array("new".utf8), forKey: "k", version: 2)
        let moved = try await PostgresKeystore.migrate(
            configuration: configuration(), service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: .raw(key))
        XCTAssertEqual(moved, 1, "the source item leaves")
        let value = try await target.value(forKey: "k")
        XCTAssertEqual(value, Array("new".utf8))
    }

    /// More items than one statement of a migration takes (a thousand): every one moves,
    /// re-sealed, in one transaction, with the versioned rule applied per item.
    func testAMigrationLargerThanOneChunkMovesEveryItem() async throws {
        let source = try await keystore(group: .none)
        let target = try await keystore(group: AccessGroup(name: "team"))
        var batch = KeystoreBatch()
        for index in 0..<2_500 { batch.set(Array("v\(index)".utf8), forKey: String(format: "k%05d", index), version: 1) }
        _ = try await source.commit(batch)
        try await target.set(Array("newer".utf8), forKey: "k01234", version: 2)

        let moved = try await PostgresKeystore.migrate(
            configuration: configuration(), service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: .raw(key))
        XCTAssertEqual(moved, 2_500)
        let remaining = try await source.keys()
        XCTAssertEqual(remaining, [])
        let keys = try await target.keys()
        XCTAssertEqual(keys.count, 2_500)
        let first = try await target.value(forKey: "k00000")
        XCTAssertEqual(first, Array("v0".utf8))
        let last = try await target.value(forKey: "k02499")
        XCTAssertEqual(last, Array("v2499".utf8))
        let newer = try await target.value(forKey: "k01234")
        XCTAssertEqual(newer, Array("newer".utf8), "the newer target item wins")
    }
}
