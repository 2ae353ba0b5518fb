import BrokerTestSupport
import CSQLite
import Foundation
import InMemoryLogging
import Logging
import Synchronization
import XCTest
@testable import SecureStorage

final class SQLiteKeystoreTests: XCTestCase {
    func testRoundTripKeysAndRemove() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        let missing = try await keystore.value(forKey: "absent")
        XCTAssertNil(missing)
        try await keystore.set(bytes("one"), forKey: "b")
        try await keystore.set(bytes("two"), forKey: "a")
        try await keystore.set(bytes("three"), forKey: "b")
        let b = try await keystore.requireValue(forKey: "b")
        XCTAssertEqual(string(b), "three")
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["a", "b"])
        try await keystore.remove(forKey: "a")
        try await keystore.remove(forKey: "a")
        let keysAfter = try await keystore.keys()
        XCTAssertEqual(keysAfter, ["b"])
        await assertThrows(KeystoreError.self, code: .itemNotFound) { try await keystore.requireValue(forKey: "a") }
        await assertThrows(KeystoreError.self, code: .invalidName) { try await keystore.set([1], forKey: "") }

        // A second instance on the same files reads what the first wrote.
        let second = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { second.close() }
        let fromSecond = try await second.value(forKey: "b")
        XCTAssertEqual(string(fromSecond), "three")
    }

    /// A database on a network file system is warned of at open: WAL's index is shared by
    /// one host's processes only. The kinds are told apart by `statfs`'s type (no network
    /// file system is at hand to mount here: `/proc` shows the type is read).
    func testNetworkFileSystemsAreToldApartByTheirType() {
        XCTAssertEqual(NetworkFileSystem.name(ofType: 0x6969), "nfs")
        XCTAssertEqual(NetworkFileSystem.name(ofType: 0xFF53_4D42), "cifs")
        XCTAssertEqual(NetworkFileSystem.name(ofType: 0x0102_1997), "9p")
        XCTAssertNil(NetworkFileSystem.name(ofType: 0xEF53), "ext4")
        XCTAssertNil(NetworkFileSystem.name(ofType: 0x0102_1994), "tmpfs")
        XCTAssertNil(NetworkFileSystem.name(ofType: 0x6573_5546), "FUSE is left out")
        XCTAssertEqual(ib_file_system_type("/proc"), 0x9FA0)
        XCTAssertEqual(ib_file_system_type("/no/such/path"), -1)
        XCTAssertNil(NetworkFileSystem.name(ofFileSystemAt: "/proc"))
    }

    func testEdgeValuesAndKeys() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        let large = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let traversal = "../../etc/passwd ✓"
        try await keystore.set([], forKey: "empty")
        try await keystore.set(large, forKey: "large")
        try await keystore.set(bytes("ü"), forKey: traversal)
        try await keystore.set(bytes("x"), forKey: String(repeating: "k", count: 180))
        let empty = try await keystore.value(forKey: "empty")
        XCTAssertEqual(empty, [], "an empty value is stored, not absent")
        let readLarge = try await keystore.value(forKey: "large")
        XCTAssertEqual(readLarge, large)
        let readTraversal = try await keystore.value(forKey: traversal)
        XCTAssertEqual(string(readTraversal), "ü")
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, [traversal, "empty", String(repeating: "k", count: 180), "large"])
        // Keys are rows, never paths: nothing appeared outside the store.
        XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.root + "/etc"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.path + "/etc"))
    }

    /// Values no keystore can work with are refused by every entry point before anything is
    /// created (a zero poll interval made the change feed poll without pause).
    func testValuesNoKeystoreCanUseAreRefusedBeforeAnythingIsCreated() async throws {
        let cases: [(String, (inout SQLiteKeystore.Configuration) -> Void)] = [
            ("busyTimeout is negative", { $0.busyTimeout = .milliseconds(-1) }),
            ("changePollInterval is not positive", { $0.changePollInterval = .zero }),
            ("changeLogRetention is negative", { $0.changeLogRetention = -1 }),
        ]
        let temporary = try TemporaryRoot()
        for (problem, change) in cases {
            var configuration = SQLiteKeystore.Configuration()
            change(&configuration)
            let root = temporary.root
            let calls: [(String, () async throws(KeystoreError) -> Void)] = [
                ("init", { () async throws(KeystoreError) in _ = try SQLiteKeystore(root: root, service: "tool", keySource: testKey(), configuration: configuration) }),
                ("SingleReader", { () async throws(KeystoreError) in _ = try SQLiteKeystore.SingleReader.open(root: root, service: "tool", keySource: testKey(), configuration: configuration) }),
                ("namespaceExists", { () async throws(KeystoreError) in _ = try SQLiteKeystore.namespaceExists(root: root, service: "tool", configuration: configuration) }),
                ("migrate", { () async throws(KeystoreError) in
                    _ = try await SQLiteKeystore.migrate(
                        root: root, service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: testKey(), configuration: configuration)
                }),
                ("rekey", { () async throws(KeystoreError) in _ = try await SQLiteKeystore.rekey(root: root, service: "tool", group: .none, keySource: testKey(), configuration: configuration) }),
            ]
            for (name, call) in calls {
                let error = await assertThrows(KeystoreError.self, code: .invalidConfiguration) { try await call() }
                XCTAssertTrue(error?.reason.contains(problem) ?? false, "\(name): \(String(describing: error))")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: root), "\(problem): something was created")
        }
        // Zero stays usable where it means something: no waiting for a lock, no change log kept.
        let keystore = try SQLiteKeystore(
            root: temporary.root, service: "tool", keySource: testKey(), configuration: .init(busyTimeout: .zero, changeLogRetention: 0))
        keystore.close()
    }

    /// A connection whose open fails (a file that is gone, no descriptor left under a low
    /// `ulimit -n`) throws and frees what it allocated once: its `deinit` still runs after the
    /// throw, and freeing there as well was a double free that aborted the process.
    func testAConnectionThatCannotOpenThrowsAndTheProcessGoesOn() throws {
        let temporary = try TemporaryRoot()
        for _ in 0..<100 {
            assertThrows(KeystoreError.self) {
                _ = try SQLiteConnection(path: temporary.root + "/missing.sqlite", busyTimeout: .seconds(1))
            }
        }
    }

    func testInvalidNames() async throws {
        let temporary = try TemporaryRoot()
        _ = assertThrows(KeystoreError.self, code: .invalidName) { try SQLiteKeystore(root: temporary.root, service: "") }
        _ = assertThrows(KeystoreError.self, code: .invalidName) { try SQLiteKeystore(root: "", service: "tool") }
        _ = assertThrows(KeystoreError.self, code: .invalidName) { try SQLiteKeystore(root: temporary.root, service: String(repeating: "s", count: 151)) }
        _ = assertThrows(KeystoreError.self, code: .invalidName) { try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: AccessGroup(name: "")) }
        _ = assertThrows(KeystoreError.self, code: .invalidName) { try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: AccessGroup(name: String(repeating: "g", count: 151))) }
        // A refused group name is not recorded as the service's last group: the next open works.
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", configuration: .init(moveItemsFromPreviousGroup: true))
        defer { keystore.close() }
        await assertThrows(KeystoreError.self, code: .invalidName) { try await keystore.value(forKey: String(repeating: "x", count: 181)) }
        await assertThrows(KeystoreError.self, code: .invalidName) { try await keystore.set([1], forKey: String(repeating: "x", count: 181)) }
        await assertThrows(KeystoreError.self, code: .invalidName) { try await keystore.remove(forKey: "") }
    }

    func testServicesAndGroupsAreSeparateNamespaces() async throws {
        let temporary = try TemporaryRoot()
        let key = testKey()
        let a = try SQLiteKeystore(root: temporary.root, service: "a", keySource: key)
        defer { a.close() }
        let b = try SQLiteKeystore(root: temporary.root, service: "b", keySource: key)
        defer { b.close() }
        let team = try SQLiteKeystore(root: temporary.root, service: "a", accessGroup: AccessGroup(name: "team"), keySource: key)
        defer { team.close() }
        try await a.set(bytes("a"), forKey: "k")
        let inB = try await b.value(forKey: "k")
        XCTAssertNil(inB)
        let inTeam = try await team.value(forKey: "k")
        XCTAssertNil(inTeam)
        try await b.set(bytes("b"), forKey: "k")
        try await team.remove(forKey: "k")
        let stillA = try await a.value(forKey: "k")
        XCTAssertEqual(string(stillA), "a")
        XCTAssertNotEqual(a.namespace.databasePath, b.namespace.databasePath)
        XCTAssertNotEqual(a.namespace.databasePath, team.namespace.databasePath)
    }

    func testKeyFileIsCreatedOncePerGroupAndReused() async throws {
        let temporary = try TemporaryRoot()
        let first = try SQLiteKeystore(root: temporary.root, service: "tool")
        try await first.set(bytes("v"), forKey: "k")
        first.close()
        let keyPath = try StoreLayout(root: temporary.root, service: "tool").keyFilePath(.none)
        let original = try XCTUnwrap(FileManager.default.contents(atPath: keyPath))
        XCTAssertEqual(original.count, 32)
        XCTAssertEqual(mode(of: keyPath), 0o600)
        // A second service in the same group shares the group's key file: it makes no key
        // of its own, and what it sealed opens with the first key.
        let other = try SQLiteKeystore(root: temporary.root, service: "other")
        try await other.set(bytes("o"), forKey: "k")
        other.close()
        let directory = (keyPath as NSString).deletingLastPathComponent
        let keyFiles = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix("key") }
        XCTAssertEqual(keyFiles, [(keyPath as NSString).lastPathComponent], "another key file was made")
        let reopened = try SQLiteKeystore(root: temporary.root, service: "other", keySource: .raw(Array(original)))
        defer { reopened.close() }
        let sealedByOther = try await reopened.value(forKey: "k")
        XCTAssertEqual(string(sealedByOther), "o")
        let second = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { second.close() }
        let value = try await second.value(forKey: "k")
        XCTAssertEqual(string(value), "v")
        XCTAssertEqual(FileManager.default.contents(atPath: keyPath), original)
    }

    func testAKeyFileOfTheWrongSizeOrARawKeyOfTheWrongLengthIsInvalid() throws {
        let temporary = try TemporaryRoot()
        _ = assertThrows(KeystoreError.self, code: .invalidKey) { try SQLiteKeystore(root: temporary.root, service: "tool", keySource: .raw([1, 2, 3])) }
        try SQLiteKeystore(root: temporary.root, service: "tool").close()
        let keyPath = try StoreLayout(root: temporary.root, service: "tool").keyFilePath(.none)
        XCTAssertTrue(FileManager.default.createFile(atPath: keyPath, contents: Data(repeating: 1, count: 31), attributes: [.posixPermissions: 0o600]))
        let error = assertThrows(KeystoreError.self, code: .invalidKey) { try SQLiteKeystore(root: temporary.root, service: "tool") }
        XCTAssertEqual(error?.path, keyPath)
    }

    /// Opening says whether the SIGBUS guard is in place (a shared group without it is open
    /// to a member who truncates the `-shm` file): on this system's SQLite it is.
    func testOpeningLogsWhetherTheSIGBUSGuardIsInstalled() throws {
        let temporary = try TemporaryRoot()
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test", factory: { _ in handler })
        logger.logLevel = .debug
        // The warning is for shared groups alone, whose -shm other members can truncate.
        for group in [AccessGroup.none, AccessGroup(name: "team")] {
            let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: group, keySource: testKey(), logger: logger)
            keystore.close()
        }
        let opened = handler.entries.filter { $0.message.description == "keystore opened" }
        XCTAssertEqual(opened.map { $0.metadata["broker.shmGuard"].map { "\($0)" } }, ["installed", "installed"], "\(handler.entries.map(\.metadata))")
        XCTAssertFalse(handler.entries.contains { $0.level == .warning }, "\(handler.entries.map(\.message))")
    }

    func testLoggingNeverContainsSecrets() async throws {
        let temporary = try TemporaryRoot()
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test", factory: { _ in handler })
        logger.logLevel = .trace
        let secret = "very-secret-token-\(UUID().uuidString)"
        let passphrase = "passphrase-\(UUID().uuidString)"
        let first = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: .passphrase(passphrase), logger: logger)
        try await first.set(bytes(secret), forKey: "alice")
        _ = try await first.value(forKey: "alice")
        try await first.remove(forKey: "alice")
        try await first.set(bytes(secret), forKey: "bob")
        first.close()
        // A group change with migration logs too.
        let moved = try SQLiteKeystore(
            root: temporary.root, service: "tool", accessGroup: AccessGroup(name: "team"), keySource: .passphrase(passphrase),
            configuration: .init(moveItemsFromPreviousGroup: true), logger: logger)
        moved.close()
        XCTAssertFalse(handler.entries.isEmpty)
        XCTAssertTrue(handler.entries.contains { $0.message.description.contains("moved") }, "\(handler.entries.map(\.message))")
        for entry in handler.entries {
            let text = "\(entry.message) \(entry.metadata)"
            XCTAssertNil(leakedRun(in: text, of: [secret, passphrase]), text)
            for key in entry.metadata.keys { XCTAssertTrue(key.hasPrefix("broker."), key) }
        }
    }

    func testOnlyCiphertextReachesTheDatabase() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        let secret = "very-secret-value-\(UUID().uuidString)"
        try await keystore.set(bytes(secret), forKey: "session.alice")
        keystore.close()
        var found = false
        for name in try FileManager.default.contentsOfDirectory(atPath: temporary.root + "/users/\(geteuid())") {
            let data = try Data(contentsOf: URL(fileURLWithPath: temporary.root + "/users/\(geteuid())/" + name))
            if data.range(of: Data(secret.utf8)) != nil { found = true }
        }
        XCTAssertFalse(found, "plaintext found in a database file")
    }

    func testVersionedWritesConverge() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        let first = try await keystore.set(bytes("v5"), forKey: "k", version: 5)
        XCTAssertTrue(first)
        let older = try await keystore.set(bytes("v3"), forKey: "k", version: 3)
        XCTAssertFalse(older)
        let equal = try await keystore.set(bytes("v5b"), forKey: "k", version: 5)
        XCTAssertTrue(equal)
        let value = try await keystore.value(forKey: "k")
        XCTAssertEqual(string(value), "v5b")

        // Concurrent writers with distinct versions end on the highest, whatever the order.
        let versions = Array(1...40).shuffled()
        await withTaskGroup(of: Void.self) { group in
            for version in versions {
                group.addTask { _ = try? await keystore.set(bytes("v\(version)"), forKey: "race", version: Int64(version)) }
            }
        }
        let race = try await keystore.value(forKey: "race")
        XCTAssertEqual(string(race), "v40")

        // An unversioned write always applies; a remove too.
        try await keystore.set(bytes("plain"), forKey: "race")
        let lower = try await keystore.set(bytes("v1"), forKey: "race", version: 1)
        XCTAssertTrue(lower, "a versioned write over an unversioned item applies")
        let applied = try await keystore.commit({ var b = KeystoreBatch(); b.remove(forKey: "race"); b.remove(forKey: "race"); return b }())
        XCTAssertEqual(applied, [true, false])
    }

    func testBatchIsAtomic() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        try await keystore.set(bytes("old"), forKey: "a")
        var bad = KeystoreBatch()
        bad.set(bytes("new"), forKey: "a")
        bad.set(bytes("x"), forKey: String(repeating: "k", count: 500))
        await assertThrows(KeystoreError.self, code: .invalidName) { try await keystore.commit(bad) }
        let a = try await keystore.value(forKey: "a")
        XCTAssertEqual(string(a), "old", "nothing of a failed batch applies")

        var good = KeystoreBatch()
        XCTAssertTrue(good.isEmpty)
        for index in 0..<20 { good.set(bytes("\(index)"), forKey: "g\(index)") }
        good.remove(forKey: "a")
        let applied = try await keystore.commit(good)
        XCTAssertEqual(applied.count, 21)
        XCTAssertTrue(applied.allSatisfy { $0 })
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 20)
        XCTAssertFalse(keys.contains("a"))
    }

    /// A batch that fails inside a shared transaction (a sealed value over the connection's
    /// length limit: sealing refuses such values earlier, so this goes to the writer itself)
    /// fails alone: the others of its group are committed one by one, and nothing of the
    /// failed batch applies.
    func testAFailingBatchInAGroupCommitFailsAlone() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", configuration: .init(busyTimeout: .seconds(10)))
        defer { keystore.close() }
        // Another connection holds the write lock, so the batches queue up behind the first
        // and go into one group once it is released.
        let blocker = try SQLiteConnection(path: keystore.namespace.databasePath, busyTimeout: .seconds(1))
        defer { blocker.close() }
        try blocker.run("BEGIN IMMEDIATE")
        let results = LockedBox<[String: Result<[Bool], KeystoreError>]>([:])
        func submit(_ name: String, _ operations: [SealedOperation]) {
            keystore.writer.submit(operations) { result in results.withLock { $0[name] = result } }
        }
        submit("first", [.set(key: "first", sealed: [1], version: nil)])
        try await Task.sleep(for: .milliseconds(200))
        for index in 0..<8 { submit("k\(index)", [.set(key: "k\(index)", sealed: [2], version: nil)]) }
        submit("bad", [
            .set(key: "x", sealed: [3], version: nil),
            .set(key: "poison", sealed: [UInt8](repeating: 0, count: SQLiteConnection.maximumLength + 1), version: nil),
        ])
        for index in 8..<16 { submit("k\(index)", [.set(key: "k\(index)", sealed: [2], version: nil)]) }
        try blocker.run("ROLLBACK")
        let done = await eventually(timeout: .seconds(30)) { results.current.count == 18 }
        XCTAssertTrue(done, "not every batch completed: \(results.current.keys.sorted())")
        let finished = results.current
        guard case .failure(let error)? = finished["bad"] else { return XCTFail("the bad batch did not fail: \(String(describing: finished["bad"]))") }
        XCTAssertEqual(error.code, .valueTooLarge, "\(error)")
        for (name, result) in finished where name != "bad" {
            guard case .success(let applied) = result else { return XCTFail("\(name) failed with the bad batch: \(result)") }
            XCTAssertEqual(applied, [true], name)
        }
        XCTAssertNil(try keystore.storedRow(forKey: "x"), "part of the failed batch applied")
        XCTAssertNil(try keystore.storedRow(forKey: "poison"))
        for index in 0..<16 { XCTAssertEqual(try keystore.storedRow(forKey: "k\(index)"), [2], "k\(index)") }
    }

    /// Writers that arrive while a commit waits share the next transaction (one fsync for
    /// many), and nothing is lost.
    func testSixtyFourConcurrentWritersShareCommitsAndLoseNothing() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", configuration: .init(busyTimeout: .seconds(10)))
        defer { keystore.close() }
        // Held while the writers queue up: released, they go in a few shared transactions.
        let blocker = try SQLiteConnection(path: keystore.namespace.databasePath, busyTimeout: .seconds(1))
        defer { blocker.close() }
        try blocker.run("BEGIN IMMEDIATE")
        let before = keystore.writer.committedTransactions.load(ordering: .relaxed)
        let queuedBefore = keystore.writer.queuedBatches.load(ordering: .relaxed)
        let writers = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<64 {
                    group.addTask { try await keystore.set(bytes("\(writer)-0"), forKey: "w\(writer)-0") }
                }
                try await group.waitForAll()
            }
        }
        // Every writer found the lock held (inline, at most one tries and gives up) and queued.
        let allQueued = await eventually(timeout: .seconds(30)) { keystore.writer.queuedBatches.load(ordering: .relaxed) - queuedBefore == 64 }
        XCTAssertTrue(allQueued, "the writers did not all queue behind the lock")
        try blocker.run("ROLLBACK")
        try await writers.value
        let shared = keystore.writer.committedTransactions.load(ordering: .relaxed) - before
        XCTAssertLessThanOrEqual(shared, 8, "64 writers waiting together took \(shared) transactions")

        // Unhindered, several rounds each, concurrently.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<64 {
                group.addTask {
                    for index in 1..<5 { try await keystore.set(bytes("\(writer)-\(index)"), forKey: "w\(writer)-\(index)") }
                }
            }
            try await group.waitForAll()
        }
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 320)
        for writer in [0, 31, 63] {
            for index in 0..<5 {
                let value = try await keystore.value(forKey: "w\(writer)-\(index)")
                XCTAssertEqual(string(value), "\(writer)-\(index)")
            }
        }
    }

    func testClosedKeystoreIsUnavailable() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        keystore.close()
        keystore.close()
        await assertThrows(KeystoreError.self, code: .storeUnavailable) { try await keystore.set([1], forKey: "k") }
        await assertThrows(KeystoreError.self, code: .storeUnavailable) { try await keystore.value(forKey: "k") }
    }

    func testBusyPastTheTimeoutIsStoreUnavailable() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(
            root: temporary.root, service: "tool", configuration: .init(busyTimeout: .milliseconds(100))
        )
        defer { keystore.close() }
        let blocker = try SQLiteConnection(path: keystore.namespace.databasePath, busyTimeout: .seconds(1))
        defer { blocker.close() }
        try blocker.run("BEGIN IMMEDIATE")
        await assertThrows(KeystoreError.self, code: .storeUnavailable) { try await keystore.set([1], forKey: "k") }
        // Reads never wait for the writer.
        let value = try await keystore.value(forKey: "k")
        XCTAssertNil(value)
        try blocker.run("ROLLBACK")
        try await keystore.set([1], forKey: "k")
    }

    /// A batch that finds the writer idle commits on its caller's thread; one that finds
    /// another connection holding the write lock never waits for it there: it goes to the
    /// writer's queue, which waits up to the busy timeout and commits once the lock is free.
    func testAnIdleWriterCommitsInlineAndALockedStoreIsLeftToTheQueue() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(
            root: temporary.root, service: "tool", configuration: .init(busyTimeout: .seconds(10))
        )
        defer { keystore.close() }
        for index in 0..<5 { try await keystore.set([UInt8(index)], forKey: "k\(index)") }
        XCTAssertEqual(keystore.writer.inlineCommits.load(ordering: .relaxed), 5)

        let blocker = try SQLiteConnection(path: keystore.namespace.databasePath, busyTimeout: .seconds(1))
        defer { blocker.close() }
        try blocker.run("BEGIN IMMEDIATE")
        let committed = LockedBox(false)
        let commit = Task {
            try await keystore.set([9], forKey: "k9")
            committed.withLock { $0 = true }
        }
        // Released once the commit found the lock inline and went to the queue.
        let found = await eventually(timeout: .seconds(10)) { keystore.writer.lockedInlineCommits.load(ordering: .relaxed) == 1 }
        XCTAssertTrue(found, "the commit never tried inline")
        try await Task.sleep(for: .milliseconds(100))
        XCTAssertFalse(committed.current, "the commit did not wait for the lock")
        try blocker.run("ROLLBACK")
        try await commit.value
        XCTAssertEqual(keystore.writer.inlineCommits.load(ordering: .relaxed), 5, "the locked commit ran inline")
        let value = try await keystore.value(forKey: "k9")
        XCTAssertEqual(value, [9])
    }

    /// Commits do not run SQLite's automatic checkpoint: the WAL is checkpointed in the
    /// background (the writer only copies what is left at twice the threshold), so the WAL file
    /// stays bounded, and everything committed survives a reopen.
    func testTheWALIsCheckpointedInTheBackgroundAndStaysBounded() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        let path = keystore.namespace.databasePath
        let value = [UInt8](repeating: 0x5A, count: 1_300)
        let commits = 2_000
        for index in 0..<commits { try await keystore.set(value, forKey: "item\(index)") }

        func size(_ file: String) -> Int { (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0 }
        XCTAssertGreaterThan(keystore.checkpointer.backgroundPasses.load(ordering: .relaxed), 0, "no background checkpoint ran")
        // Started over after checkpoints, not grown by every commit (five frames each,
        // ~10,000 frames without checkpoints).
        let frame = StoreSchema.pageSize + 24
        XCTAssertLessThan(size(path + "-wal"), (Checkpointer.writerThreshold + 500) * frame)
        XCTAssertGreaterThan(size(path), commits * value.count / 2, "the database file holds the checkpointed items")
        keystore.close()

        let reopened = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        defer { reopened.close() }
        let keys = try await reopened.keys()
        XCTAssertEqual(keys.count, commits)
        let last = try await reopened.value(forKey: "item\(commits - 1)")
        XCTAssertEqual(last, value)
    }

    /// A writer committing back to back is not chased by checkpoint passes: one background pass
    /// per ~1,000 WAL pages copies the bulk and the writer's next commit copies the rest, so the
    /// WAL starts over. Passes that chased the writer instead ran about once per three commits
    /// on an ext4 disk, each with two syncs.
    func testASequentialWriterIsNotChasedByCheckpointPasses() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        defer { keystore.close() }
        let value = [UInt8](repeating: 0x5A, count: 1_300)
        let commits = 2_000
        for index in 0..<commits { try await keystore.set(value, forKey: "item\(index)") }

        let background = keystore.checkpointer.backgroundPasses.load(ordering: .relaxed)
        let writer = keystore.checkpointer.writerPasses.load(ordering: .relaxed)
        // ~4 frames a commit: ~8 cycles of 1,000 pages, each one background and one writer pass.
        XCTAssertGreaterThan(background, 0, "no background checkpoint ran")
        XCTAssertGreaterThan(writer, 0, "the writer never finished a checkpoint")
        XCTAssertLessThanOrEqual(background + writer, commits / 40, "\(background) background and \(writer) writer passes for \(commits) commits")
    }

    /// A writer that pauses while each background pass runs leaves it nothing to hand over: the
    /// pass copies everything, the next write starts the WAL over, and the next cycle is again
    /// the background's. (A hand-off left set across the restart made the writer copy every
    /// second cycle of 1,000 pages inline, on its caller's thread.)
    func testAPassThatCopiedEverythingLeavesTheWriterNothingToCopy() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        defer { keystore.close() }
        let checkpointer = keystore.checkpointer
        let value = [UInt8](repeating: 0x5A, count: 1_300)
        var index = 0
        // ~4 WAL pages a commit: two cycles of 1,000 pages take ~500 commits.
        while checkpointer.backgroundPasses.load(ordering: .relaxed) < 2 && index < 2_000 {
            try await keystore.set(value, forKey: "item\(index)")
            index += 1
            checkpointer.waitForBackgroundPass()
        }
        XCTAssertEqual(checkpointer.backgroundPasses.load(ordering: .relaxed), 2, "two cycles did not each get a background pass in \(index) commits")
        XCTAssertEqual(checkpointer.writerPasses.load(ordering: .relaxed), 0, "the writer checkpointed after a pass that had copied everything")
    }

    /// A read runs on the caller's thread, on a connection with no busy timeout; one that
    /// finds the database busy (in WAL mode only a crash recovery or another program's
    /// exclusive lock does that) runs again on a reader lane, whose connection waits up to the
    /// busy timeout; any other error is final.
    func testReadsRunInlineAndOnlyABusyDatabaseSendsThemToALane() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        let pool = try ReaderPool(path: keystore.namespace.databasePath, busyTimeout: .seconds(7))
        defer { pool.close() }

        let plain = try await pool.read { connection throws(KeystoreError) -> Duration in connection.busyTimeout }
        XCTAssertEqual(plain, .zero, "a read that can answer at once runs inline")

        let attempts = LockedBox<[Duration]>([])
        let threads = LockedBox<[pthread_t]>([])
        let caller = pthread_self()
        let busy = try await pool.read { connection throws(KeystoreError) -> Duration in
            attempts.withLock { $0.append(connection.busyTimeout) }
            threads.withLock { $0.append(pthread_self()) }
            if connection.busyTimeout == .zero { throw KeystoreError(.storeUnavailable, "database is locked") }
            return connection.busyTimeout
        }
        XCTAssertEqual(busy, .seconds(7))
        XCTAssertEqual(attempts.current, [.zero, .seconds(7)])
        // A lane's read, which may wait up to the busy timeout, runs on the lane's thread,
        // never on the caller's (a thread of the cooperative pool).
        XCTAssertEqual(threads.current.count, 2)
        XCTAssertEqual(threads.current.first.map { pthread_equal($0, caller) }, 1, "the first try runs inline")
        XCTAssertEqual(threads.current.last.map { pthread_equal($0, caller) }, 0, "the lane's read ran on the caller's thread")

        let damagedAttempts = LockedBox(0)
        await assertThrows(KeystoreError.self, code: .authenticationFailed) {
            _ = try await pool.read { _ throws(KeystoreError) -> Int in
                damagedAttempts.withLock { $0 += 1 }
                throw KeystoreError(.authenticationFailed, "item 'k' failed authentication")
            }
        }
        XCTAssertEqual(damagedAttempts.current, 1, "only a busy database is retried")

        pool.close()
        await assertThrows(KeystoreError.self, code: .storeUnavailable) {
            _ = try await pool.read { _ throws(KeystoreError) -> Int in 1 }
        }
    }

    /// `close()` returns with every reader connection closed, a lane's included, after the
    /// read that lane was running (it used to close the lanes' connections later, on their
    /// queues): a closed keystore holds no descriptor of its database.
    func testClosingTheReadersClosesEveryConnectionBeforeItReturns() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        let path = keystore.namespace.databasePath
        keystore.close()
        XCTAssertEqual(try Self.descriptors(of: path), [], "the keystore's own connections are closed")
        let pool = try ReaderPool(path: path, busyTimeout: .seconds(7))
        let onLane = LockedBox(false)
        // Busy inline, so the read goes to a lane, whose connection it holds for a while.
        let slow = Task {
            try await pool.read { connection throws(KeystoreError) -> Int in
                if connection.busyTimeout == .zero { throw KeystoreError(.storeUnavailable, "database is locked") }
                onLane.withLock { $0 = true }
                Thread.sleep(forTimeInterval: 0.3)
                return 1
            }
        }
        while !onLane.current { try await Task.sleep(for: .milliseconds(5)) }
        pool.close()
        XCTAssertEqual(try Self.descriptors(of: path), [], "a connection was still open when close() returned")
        let value = try await slow.value
        XCTAssertEqual(value, 1, "the read the lane was running finished")
    }

    /// The same for an inline read: `close()` returns after the read in progress on the
    /// caller's thread finished and its connection closed (it used to close that connection
    /// when the read handed it back, after `close()` returned).
    func testClosingTheReadersWaitsForAnInlineReadInProgress() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        let path = keystore.namespace.databasePath
        keystore.close()
        let pool = try ReaderPool(path: path, busyTimeout: .seconds(7))
        let reading = LockedBox(false)
        let finished = LockedBox(false)
        let slow = Task {
            try await pool.read { connection throws(KeystoreError) -> Int in
                XCTAssertEqual(connection.busyTimeout, .zero, "the read runs inline")
                reading.withLock { $0 = true }
                Thread.sleep(forTimeInterval: 0.3)
                finished.withLock { $0 = true }
                return 1
            }
        }
        while !reading.current { try await Task.sleep(for: .milliseconds(5)) }
        pool.close()
        XCTAssertTrue(finished.current, "close() returned while an inline read was in progress")
        XCTAssertEqual(try Self.descriptors(of: path), [], "a connection was still open when close() returned")
        let value = try await slow.value
        XCTAssertEqual(value, 1, "the inline read finished with its answer")
        await assertThrows(KeystoreError.self, code: .storeUnavailable) {
            _ = try await pool.read { _ throws(KeystoreError) -> Int in 1 }
        }
    }

    /// This process's descriptors open on the database at `path` or its `-wal` and `-shm`.
    private static func descriptors(of path: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap { name in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)"),
                target.hasPrefix(path)
            else { return nil }
            return target
        }
    }
}
