import Foundation
import XCTest
@_spi(Testing) @testable import SecureStorage

struct SimulatedCrash: Error {}

final class MigrationTests: XCTestCase {
    let team = AccessGroup(name: "team")
    let teamMigrating = AccessGroup(name: "team", migrateItemsOfUserSession: true)

    private func fill(_ keystore: FileKeystore, count: Int) throws {
        for index in 0..<count { try keystore.set(bytes("value-\(index)"), forKey: "item-\(index)") }
    }

    private func assertItems(_ keystore: FileKeystore, count: Int, file: StaticString = #filePath, line: UInt = #line) throws {
        let keys = try keystore.keys()
        XCTAssertEqual(keys.count, count, "\(keystore.accessGroup)", file: file, line: line)
        for index in 0..<count {
            XCTAssertEqual(string(try keystore.data(forKey: "item-\(index)")), "value-\(index)", file: file, line: line)
        }
    }

    /// The namespace's item count, read straight from disk (no open, so no migration).
    private func itemCount(_ temporary: TemporaryRoot, _ group: AccessGroup) throws -> Int {
        let layout = try KeystoreLayout(root: temporary.root, service: "tool")
        return try Namespace(layout: layout, group: group, lockTimeout: .seconds(1)).itemKeys().count
    }

    func testMigrationOffLeavesOldItemsAndStartsEmpty() throws {
        let temporary = try TemporaryRoot()
        try fill(FileKeystore(root: temporary.root, service: "tool", accessGroup: .none), count: 5)
        let shared = try FileKeystore(root: temporary.root, service: "tool", accessGroup: team)
        XCTAssertEqual(try shared.keys(), [])
        try shared.set(bytes("new"), forKey: "other")
        XCTAssertEqual(try itemCount(temporary, .none), 5)
        // Going back without migration finds the old items untouched.
        try assertItems(FileKeystore(root: temporary.root, service: "tool", accessGroup: .none), count: 5)
        XCTAssertEqual(try itemCount(temporary, team), 1)
    }

    func testMigrationOnMovesItems() throws {
        let temporary = try TemporaryRoot()
        try fill(FileKeystore(root: temporary.root, service: "tool", accessGroup: .none), count: 12)
        let shared = try FileKeystore(root: temporary.root, service: "tool", accessGroup: teamMigrating)
        try assertItems(shared, count: 12)
        XCTAssertEqual(try itemCount(temporary, .none), 0)
        // And back, with AccessGroup.none(migrateItemsOfUserSession:).
        let back = try FileKeystore(root: temporary.root, service: "tool", accessGroup: .none(migrateItemsOfUserSession: true))
        try assertItems(back, count: 12)
        XCTAssertEqual(try itemCount(temporary, team), 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: back.namespace.layout.journalPath))
    }

    func testMigrationReplacesTargetItemsAndKeepsOthers() throws {
        let temporary = try TemporaryRoot()
        let old = try FileKeystore(root: temporary.root, service: "tool", accessGroup: team)
        try old.set(bytes("stale"), forKey: "item-0")
        try old.set(bytes("kept"), forKey: "only-in-target")
        try fill(FileKeystore(root: temporary.root, service: "tool", accessGroup: .none), count: 3)
        let moved = try FileKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team)
        XCTAssertEqual(moved, 3)
        let target = try FileKeystore(root: temporary.root, service: "tool", accessGroup: team)
        XCTAssertEqual(string(try target.data(forKey: "item-0")), "value-0")
        XCTAssertEqual(string(try target.data(forKey: "only-in-target")), "kept")
        XCTAssertEqual(try target.keys().count, 4)
    }

    func testExplicitMigrateWithPassphraseKeys() throws {
        let temporary = try TemporaryRoot()
        let source = KeySource.passphrase("pass")
        try fill(FileKeystore(root: temporary.root, service: "tool", accessGroup: .none, keySource: source), count: 4)
        XCTAssertEqual(try FileKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team, keySource: source), 4)
        try assertItems(FileKeystore(root: temporary.root, service: "tool", accessGroup: team, keySource: source), count: 4)
        XCTAssertEqual(try FileKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team, keySource: source), 0)
    }

    /// Asserts that a refused migration left everything as it was: every source item still
    /// opens with `key`, the target holds nothing, no journal remains and the service's last
    /// group did not move to the target.
    private func assertNothingMoved(
        _ temporary: TemporaryRoot, sourceItems: Int, readable: Range<Int>, key: KeySource, lastGroup: AccessGroup?,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let layout = try KeystoreLayout(root: temporary.root, service: "tool")
        XCTAssertEqual(try itemCount(temporary, team), 0, "the target holds items", file: file, line: line)
        XCTAssertEqual(try itemCount(temporary, .none), sourceItems, "source items were removed", file: file, line: line)
        XCTAssertFalse(FileManager.default.fileExists(atPath: layout.journalPath), "a journal was left to resume", file: file, line: line)
        XCTAssertEqual(try layout.readLastGroup(), lastGroup, file: file, line: line)
        let source = try FileKeystore(root: temporary.root, service: "tool", accessGroup: .none, keySource: key)
        for index in readable {
            XCTAssertEqual(string(try source.data(forKey: "item-\(index)")), "value-\(index)", file: file, line: line)
        }
    }

    /// The reason names how many items failed out of how many, and a cause.
    private func assertReason(_ error: KeystoreError?, failed: Int, of total: Int, cause: String, file: StaticString = #filePath, line: UInt = #line) {
        let reason = error?.reason ?? ""
        XCTAssertTrue(reason.contains("\(failed) of \(total) item"), reason, file: file, line: line)
        XCTAssertTrue(reason.contains(cause), reason, file: file, line: line)
    }

    func testMigrationWithWrongKeyThrowsAndMovesNothing() throws {
        let temporary = try TemporaryRoot()
        let right = KeySource.raw((0..<32).map { UInt8($0) })
        let wrong = KeySource.raw((0..<32).map { UInt8(255 - $0) })
        try fill(FileKeystore(root: temporary.root, service: "tool", accessGroup: .none, keySource: right), count: 5)
        let lastGroup = try KeystoreLayout(root: temporary.root, service: "tool").readLastGroup()

        let error = assertKeystoreError(.authenticationFailed) {
            try FileKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team, keySource: wrong)
        }
        assertReason(error, failed: 5, of: 5, cause: "wrong key or tampered")
        try assertNothingMoved(temporary, sourceItems: 5, readable: 0..<5, key: right, lastGroup: lastGroup)

        // Migration on open refuses the same way.
        _ = assertKeystoreError(.authenticationFailed) {
            try FileKeystore(root: temporary.root, service: "tool", accessGroup: teamMigrating, keySource: wrong)
        }
        try assertNothingMoved(temporary, sourceItems: 5, readable: 0..<5, key: right, lastGroup: lastGroup)

        // With the right key, everything moves.
        XCTAssertEqual(try FileKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team, keySource: right), 5)
        try assertItems(FileKeystore(root: temporary.root, service: "tool", accessGroup: team, keySource: right), count: 5)
        XCTAssertEqual(try itemCount(temporary, .none), 0)
    }

    func testTamperedSourceItemStopsMigrationUntilRemoved() throws {
        let temporary = try TemporaryRoot()
        let source = try FileKeystore(root: temporary.root, service: "tool", accessGroup: .none)
        try fill(source, count: 3)
        let path = source.namespace.itemPath(forKey: "item-2")
        var sealed = try XCTUnwrap(FileManager.default.contents(atPath: path))
        sealed[20] ^= 1
        try sealed.write(to: URL(fileURLWithPath: path))
        let lastGroup = try KeystoreLayout(root: temporary.root, service: "tool").readLastGroup()

        let error = assertKeystoreError(.authenticationFailed) {
            try FileKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team)
        }
        assertReason(error, failed: 1, of: 3, cause: "wrong key or tampered")
        XCTAssertTrue(FileManager.default.fileExists(atPath: path))
        try assertNothingMoved(temporary, sourceItems: 3, readable: 0..<2, key: .keyFile, lastGroup: lastGroup)

        // Removing the damaged item (without opening it) lets the rest move.
        try source.remove(forKey: "item-2")
        XCTAssertEqual(try FileKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team), 2)
        XCTAssertEqual(try itemCount(temporary, team), 2)
        XCTAssertEqual(try itemCount(temporary, .none), 0)
    }

    func testCorruptSourceItemsStopMigrationWithCorruptFormat() throws {
        let temporary = try TemporaryRoot()
        let source = try FileKeystore(root: temporary.root, service: "tool", accessGroup: .none)
        try fill(source, count: 4)
        for key in ["item-2", "item-3"] {
            try Data([1, 2, 3]).write(to: URL(fileURLWithPath: source.namespace.itemPath(forKey: key)))
        }
        let error = assertKeystoreError(.corruptFormat) {
            try FileKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team)
        }
        assertReason(error, failed: 2, of: 4, cause: "corrupt")
        try assertNothingMoved(temporary, sourceItems: 4, readable: 0..<2, key: .keyFile, lastGroup: AccessGroup.none)
    }

    /// A migration interrupted in its copy phase and resumed with the wrong key is abandoned:
    /// the journal goes, every source item stays, and the right key migrates later.
    func testInterruptedMigrationResumedWithWrongKeyIsDropped() throws {
        let temporary = try TemporaryRoot()
        let right = KeySource.raw((0..<32).map { UInt8($0) })
        let wrong = KeySource.raw((0..<32).map { UInt8(255 - $0) })
        try fill(FileKeystore(root: temporary.root, service: "tool", accessGroup: .none, keySource: right), count: 6)
        XCTAssertThrowsError(try FileKeystore._migrate(root: temporary.root, service: "tool", from: .none, to: team, keySource: right) { name, n in
            if name == "copied" && n == 2 { throw SimulatedCrash() }
        })
        let layout = try KeystoreLayout(root: temporary.root, service: "tool")
        XCTAssertTrue(FileManager.default.fileExists(atPath: layout.journalPath))

        let error = assertKeystoreError(.authenticationFailed) {
            try FileKeystore(root: temporary.root, service: "tool", accessGroup: .none, keySource: wrong)
        }
        assertReason(error, failed: 6, of: 6, cause: "wrong key or tampered")
        XCTAssertFalse(FileManager.default.fileExists(atPath: layout.journalPath))
        XCTAssertEqual(try itemCount(temporary, .none), 6)
        XCTAssertNotEqual(try layout.readLastGroup(), team)

        let reopened = try FileKeystore(root: temporary.root, service: "tool", accessGroup: teamMigrating, keySource: right)
        try assertItems(reopened, count: 6)
        XCTAssertEqual(try itemCount(temporary, .none), 0)
    }

    /// A crash (simulated by a throwing checkpoint) at every stage resumes on the next open,
    /// even one without migration, with every item exactly once in the target.
    func testInterruptedMigrationResumesInProcess() throws {
        let count = 8
        let stages: [(String, Int)] = [("copied", 1), ("copied", 5), ("copied", count), ("committed", count), ("deleted", 1), ("deleted", 7)]
        for (stage, at) in stages {
            let temporary = try TemporaryRoot()
            try fill(FileKeystore(root: temporary.root, service: "tool", accessGroup: .none), count: count)
            XCTAssertThrowsError(try FileKeystore._migrate(root: temporary.root, service: "tool", from: .none, to: team) { name, n in
                if name == stage && n == at { throw SimulatedCrash() }
            }, "\(stage) \(at)")
            let layout = try KeystoreLayout(root: temporary.root, service: "tool")
            XCTAssertTrue(FileManager.default.fileExists(atPath: layout.journalPath), "\(stage) \(at)")
            // Nothing is lost at the crash point: every item is readable in source or target.
            XCTAssertGreaterThanOrEqual(try itemCount(temporary, .none) + itemCount(temporary, team), count)

            let reopened = try FileKeystore(root: temporary.root, service: "tool", accessGroup: team)
            try assertItems(reopened, count: count)
            XCTAssertEqual(try itemCount(temporary, .none), 0, "\(stage) \(at)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: layout.journalPath))
            XCTAssertEqual(try layout.readLastGroup(), team)
        }
    }

    func testMigrationKilledByKillNineResumes() throws {
        for (stage, at) in [("copied", 3), ("committed", 20), ("deleted", 10)] {
            let temporary = try TemporaryRoot()
            try fill(FileKeystore(root: temporary.root, service: "tool", accessGroup: .none), count: 20)
            let status = try runStress(["migrate-crash", temporary.root, "tool", "none", "team", stage, "\(at)"])
            XCTAssertNotEqual(status, 0)
            XCTAssertNotEqual(status, 2, "the crash checkpoint \(stage)/\(at) was not reached")
            let reopened = try FileKeystore(root: temporary.root, service: "tool", accessGroup: teamMigrating)
            try assertItems(reopened, count: 20)
            XCTAssertEqual(try itemCount(temporary, .none), 0, "\(stage) \(at)")
        }
    }

    func testSourceItemRewrittenAfterCommitIsNotDeleted() throws {
        let temporary = try TemporaryRoot()
        let source = try FileKeystore(root: temporary.root, service: "tool", accessGroup: .none)
        try fill(source, count: 2)
        XCTAssertThrowsError(try FileKeystore._migrate(root: temporary.root, service: "tool", from: .none, to: team) { name, _ in
            if name == "committed" { throw SimulatedCrash() }
        })
        // A writer that still had the old group open rewrites an item after the copy.
        try source.set(bytes("newer"), forKey: "item-0")
        _ = try FileKeystore(root: temporary.root, service: "tool", accessGroup: team)
        let remaining = try FileKeystore(root: temporary.root, service: "tool", accessGroup: .none)
        XCTAssertEqual(string(try remaining.data(forKey: "item-0")), "newer")
        XCTAssertNil(try remaining.data(forKey: "item-1"))
    }

    func testTenThousandItemsMigrate() throws {
        let temporary = try TemporaryRoot()
        let key = KeySource.raw([UInt8](repeating: 3, count: 32))
        let source = try FileKeystore(root: temporary.root, service: "tool", accessGroup: .none, keySource: key)
        // Populate directly (sealed, not fsynced one by one) to keep the test quick.
        for index in 0..<10_000 {
            let sealed = try source.namespace.seal(bytes("value-\(index)"), forKey: "item-\(index)", with: source.key)
            try Data(sealed).write(to: URL(fileURLWithPath: source.namespace.itemPath(forKey: "item-\(index)")))
        }
        let clock = ContinuousClock()
        var moved = 0
        let elapsed = try clock.measure {
            moved = try FileKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team, keySource: key)
        }
        print("migrated 10,000 items in \(elapsed)")
        XCTAssertEqual(moved, 10_000)
        let target = try FileKeystore(root: temporary.root, service: "tool", accessGroup: team, keySource: key)
        XCTAssertEqual(try target.keys().count, 10_000)
        XCTAssertEqual(string(try target.data(forKey: "item-9999")), "value-9999")
    }
}
