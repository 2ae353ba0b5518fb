import Foundation
import XCTest
@_spi(Testing) @testable import SecureStorage

final class SQLiteMigrationTests: XCTestCase {
    private let team = AccessGroup(name: "team")

    private func fill(_ root: String, group: AccessGroup, count: Int, keySource: KeySource = .keyFile) async throws {
        let keystore = try SQLiteKeystore(root: root, service: "tool", accessGroup: group, keySource: keySource)
        defer { keystore.close() }
        var batch = KeystoreBatch()
        for index in 0..<count { batch.set(bytes("value-\(index)"), forKey: "k\(index)", version: Int64(index)) }
        try await keystore.commit(batch)
    }

    private func contents(_ root: String, group: AccessGroup, keySource: KeySource = .keyFile) async throws -> [String: String] {
        let keystore = try SQLiteKeystore(root: root, service: "tool", accessGroup: group, keySource: keySource)
        defer { keystore.close() }
        var result: [String: String] = [:]
        for key in try await keystore.keys() { result[key] = string(try await keystore.requireValue(forKey: key)) }
        return result
    }

    func testMigrationMovesItemsAndIsIdempotent() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 6)
        let moved = try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team)
        XCTAssertEqual(moved, 6)
        let target = try await contents(temporary.root, group: team)
        XCTAssertEqual(target.count, 6)
        XCTAssertEqual(target["k3"], "value-3")
        let source = try await contents(temporary.root, group: .none)
        XCTAssertTrue(source.isEmpty)
        let again = try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team)
        XCTAssertEqual(again, 0)
        let missing = try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: AccessGroup(name: "never"), to: team)
        XCTAssertEqual(missing, 0)
    }

    func testTheTargetHoldsEverythingBeforeTheSourceIsTouched() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 5)
        // Between the two transactions (where a crash leaves both copies; the kill -9 test in
        // SQLiteMultiProcessTests reruns from there) the target already holds every item.
        let copiedState = ResultBox<Int>()
        let root = temporary.root
        _ = try await SQLiteKeystore._migrate(root: root, service: "tool", from: .none, to: team) { name in
            if name == "copied" {
                // Both copies exist at this point: the target holds everything already.
                let layout = try? StoreLayout(root: root, service: "tool")
                if let path = layout?.databasePath(AccessGroup(name: "team")), let connection = try? SQLiteConnection(path: path, busyTimeout: .seconds(5)) {
                    copiedState.value = (try? connection.withStatement("SELECT count(*) FROM items") { statement throws(KeystoreError) -> Int in
                        _ = try statement.step()
                        return Int(statement.int64(0))
                    }) ?? -1
                    connection.close()
                }
            }
        }
        XCTAssertEqual(copiedState.value, 5)
    }

    func testWrongKeyMovesNothing() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 4, keySource: testKey(1))
        // One item sealed with another key: the whole migration must refuse.
        let stray = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(2))
        try await stray.set(bytes("stray"), forKey: "stray")
        stray.close()
        let error = await assertKeystoreErrorAsync(.authenticationFailed) { () async throws(KeystoreError) in
            try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: self.team, keySource: testKey(1))
        }
        XCTAssertTrue(error?.reason.contains("1 of 5") ?? false, error?.reason ?? "")
        let target = try await contents(temporary.root, group: team, keySource: testKey(1))
        XCTAssertTrue(target.isEmpty)
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(1))
        defer { keystore.close() }
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 5)
    }

    func testAConcurrentRewriteIsNotLost() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 3, keySource: testKey())
        let root = temporary.root
        let moved = try await SQLiteKeystore._migrate(root: root, service: "tool", from: .none, to: team, keySource: testKey()) { name in
            guard name == "copied" else { return }
            // Another writer rewrites k1 in the source between the copy and the delete.
            let semaphore = DispatchSemaphore(value: 0)
            Task.detached {
                let writer = try SQLiteKeystore(root: root, service: "tool", keySource: testKey())
                try await writer.set(bytes("rewritten"), forKey: "k1")
                writer.close()
                semaphore.signal()
            }
            semaphore.wait()
        }
        XCTAssertEqual(moved, 2)
        let source = try await contents(root, group: .none, keySource: testKey())
        XCTAssertEqual(source, ["k1": "rewritten"])
        let target = try await contents(root, group: team, keySource: testKey())
        XCTAssertEqual(target.count, 3)
    }

    func testOpeningMovesFromThePreviousGroupOnlyWhenAsked() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 3)
        // Off: the new group starts empty and the old items stay.
        let empty = try await contents(temporary.root, group: team)
        XCTAssertTrue(empty.isEmpty)
        let stayed = try await contents(temporary.root, group: .none)
        XCTAssertEqual(stayed.count, 3)
        // Last group is now none again (the read above reopened it); on: team receives them.
        let moving = try SQLiteKeystore(
            root: temporary.root, service: "tool", accessGroup: team,
            configuration: .init(moveItemsFromPreviousGroup: true)
        )
        let keys = try await moving.keys()
        moving.close()
        XCTAssertEqual(keys, ["k0", "k1", "k2"])
        let left = try await contents(temporary.root, group: .none)
        XCTAssertTrue(left.isEmpty)
    }
}
