import BrokerTestSupport
import Foundation
import Synchronization
import XCTest
@testable import SecureStorage

final class SQLiteChangeFeedTests: XCTestCase {
    func testOwnCommitsAreDeliveredWithoutPolling() async throws {
        let temporary = try TemporaryRoot()
        // A poll interval far beyond the test: only the direct delivery can pass it.
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", configuration: .init(changePollInterval: .seconds(3600)))
        defer { keystore.close() }
        let first = keystore.changes()
        try await keystore.set([1], forKey: "a")
        let seenFirst = await collectChanges(first, within: 10) { $0.contains(.item("a")) }
        XCTAssertEqual(seenFirst, [.item("a")])
        // Subscribed after the set: the removal's own report is the only way "a" shows here.
        let second = keystore.changes()
        var batch = KeystoreBatch()
        batch.set([2], forKey: "b")
        batch.remove(forKey: "a")
        try await keystore.commit(batch)
        let seen = await collectChanges(second, within: 10) { $0.isSuperset(of: [.item("a"), .item("b")]) }
        XCTAssertEqual(seen, [.item("a"), .item("b")], "a removal was not reported")
    }

    func testTwoInstancesSeeEachOthersChanges() async throws {
        let temporary = try TemporaryRoot()
        let configuration = SQLiteKeystore.Configuration(changePollInterval: .milliseconds(50))
        let first = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(), configuration: configuration)
        defer { first.close() }
        let second = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(), configuration: configuration)
        defer { second.close() }
        let firstStream = first.changes()
        let secondStream = second.changes()
        try await first.set([1], forKey: "from-first")
        try await second.set([2], forKey: "from-second")
        async let firstSaw = collectChanges(firstStream, within: 10) { $0.contains(.item("from-second")) }
        async let secondSaw = collectChanges(secondStream, within: 10) { $0.contains(.item("from-first")) }
        let (a, b) = await (firstSaw, secondSaw)
        XCTAssertTrue(a.contains(.item("from-second")), "\(a)")
        XCTAssertTrue(b.contains(.item("from-first")), "\(b)")
    }

    /// Sequence numbers come from a file other group members can write. A row planted at the
    /// largest sequence leaves no room above it: instances must neither trap nor miss what
    /// follows; they report it as `.all`.
    func testAChangeRowPlantedAtTheLargestSequenceGivesAllNotACrash() async throws {
        let temporary = try TemporaryRoot()
        let writer = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        defer { writer.close() }
        try await writer.set([1], forKey: "before")
        try tamper(writer.namespace.databasePath) { connection throws(KeystoreError) in
            try connection.execute("INSERT INTO changes(seq, key, origin) VALUES(\(Int64.max), 'planted', 0)")
        }
        let watcher = try watcherPollingOften(temporary.root)
        defer { watcher.close() }
        let stream = watcher.changes()
        try await Task.sleep(for: .milliseconds(200))
        try await writer.set([2], forKey: "after")
        let seen = await collectChanges(stream, within: 3) { $0.contains(.all) || $0.contains(.item("after")) }
        XCTAssertTrue(seen.contains(.all), "\(seen)")
        let value = try await watcher.value(forKey: "after")
        XCTAssertEqual(value, [2])
    }

    /// A member plants change rows whose keys no item can have (over the 180-byte key limit,
    /// up to the connection's 1 MiB length limit): the poller reports `.all` without loading
    /// them. It used to hold up to 4,096 of them (gigabytes) and hand each to every subscriber.
    func testChangeRowsWithKeysNoItemCanHaveGiveAll() async throws {
        let temporary = try TemporaryRoot()
        let writer = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        defer { writer.close() }
        try await writer.set([1], forKey: "before")
        let watcher = try watcherPollingOften(temporary.root)
        defer { watcher.close() }
        let stream = watcher.changes()
        try await Task.sleep(for: .milliseconds(300))
        try tamper(writer.namespace.databasePath) { connection throws(KeystoreError) in
            try connection.execute("INSERT INTO changes(key, origin) VALUES('\(String(repeating: "x", count: 100_000))', 0)")
        }
        let isForged: @Sendable (KeystoreChange) -> Bool = { if case .item(let key) = $0 { key.utf8.count > 180 } else { false } }
        let seen = await collectChanges(stream, within: 3) { $0.contains(.all) || $0.contains(where: isForged) }
        XCTAssertTrue(seen.contains(.all), "\(seen.count) changes")
        XCTAssertFalse(seen.contains(where: isForged), "a key no item can have was delivered")
    }

    func testASubscriberLeftBehindByTrimmingGetsAll() async throws {
        let temporary = try TemporaryRoot()
        let watcher = try SQLiteKeystore(
            root: temporary.root, service: "tool", keySource: testKey(),
            configuration: .init(changePollInterval: .milliseconds(1500))
        )
        defer { watcher.close() }
        let writer = try SQLiteKeystore(
            root: temporary.root, service: "tool", keySource: testKey(),
            configuration: .init(changeLogRetention: 5)
        )
        defer { writer.close() }
        let stream = watcher.changes()
        // Let the watcher's first poll set its cursor, then outrun it by more than the log keeps.
        try await Task.sleep(for: .milliseconds(300))
        for index in 0..<30 { try await writer.set([UInt8(index)], forKey: "k\(index)") }
        let seen = await collectChanges(stream, within: 5) { $0.contains(.all) }
        XCTAssertTrue(seen.contains(.all), "\(seen)")
    }

    /// Writers that each commit once and close (CLI commands) keep the change log near its
    /// retention: the trim is decided from the log's extent, not from what one process added
    /// since it opened, which a one-commit process never brought to the trim interval. A log
    /// grown long (as one did before) is shortened by at most the retention per commit.
    func testShortLivedWritersKeepTheChangeLogNearItsRetention() async throws {
        let temporary = try TemporaryRoot()
        let configuration = SQLiteKeystore.Configuration(changeLogRetention: 20)
        var path = ""
        func changeRows() throws -> Int { try rowCount(path, table: "changes") }
        for index in 0..<100 {
            let writer = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(), configuration: configuration)
            path = writer.namespace.databasePath
            try await writer.set([UInt8(index)], forKey: "k\(index % 7)")
            writer.close()
            XCTAssertLessThanOrEqual(try changeRows(), 20 + 2 + 1, "after \(index + 1) one-commit writers")
        }
        XCTAssertGreaterThanOrEqual(try changeRows(), 20, "the retained rows are kept")

        try tamper(path) { connection throws(KeystoreError) in
            try connection.execute("INSERT INTO changes(key, origin) SELECT 'old', 0 FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) SELECT i FROM n)")
        }
        let writer = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(), configuration: configuration)
        defer { writer.close() }
        var counts: [Int] = [try changeRows()]
        for index in 0..<12 {
            try await writer.set([UInt8(index)], forKey: "k")
            counts.append(try changeRows())
        }
        XCTAssertTrue(zip(counts, counts.dropFirst()).allSatisfy { $0 - $1 <= 20 }, "more than the retention went at once: \(counts)")
        XCTAssertLessThanOrEqual(counts.last ?? .max, 20 + 2 + 1, "the long log was not shortened: \(counts)")

        // A member plants the extreme sequence numbers a group-writable log accepts: commits
        // neither trap on the arithmetic nor stop trimming.
        try tamper(path) { connection throws(KeystoreError) in
            try connection.execute("INSERT INTO changes(seq, key, origin) VALUES(-9223372036854775808, 'planted', 0)")
        }
        for index in 0..<40 { try await writer.set([UInt8(index)], forKey: "after-plant") }
        XCTAssertLessThanOrEqual(try changeRows(), 20 + 2 + 1, "trimming stopped after a planted row")
        // A process that opens with the planted row in place (it read it as the oldest; the
        // extent's arithmetic trapped on its first commit).
        try tamper(path) { connection throws(KeystoreError) in
            try connection.execute("INSERT INTO changes(seq, key, origin) VALUES(-9223372036854775808, 'planted', 0)")
        }
        let opener = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(), configuration: configuration)
        for index in 0..<40 { try await opener.set([UInt8(index)], forKey: "after-open") }
        opener.close()
        XCTAssertLessThanOrEqual(try changeRows(), 20 + 2 + 1, "trimming stopped for a process that opened after a planted row")
        // And a log emptied by hand, whose sequence starts afresh.
        try tamper(path) { connection throws(KeystoreError) in try connection.execute("DELETE FROM changes") }
        for index in 0..<40 { try await writer.set([UInt8(index)], forKey: "after-empty") }
        XCTAssertLessThanOrEqual(try changeRows(), 20 + 2 + 1, "trimming stopped after the log was emptied")
    }

    func testASubscriberWhoseBufferOverflowsGetsAll() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", configuration: .init(changePollInterval: .seconds(3600)))
        let stream = keystore.changes()
        // One commit of more keys than a subscriber buffers, while nobody reads.
        var batch = KeystoreBatch()
        let count = ChangeFeed.bufferSize + 100
        for index in 0..<count { batch.set([1], forKey: "k\(index)") }
        try await keystore.commit(batch)
        keystore.close()
        var changes: [KeystoreChange] = []
        for await change in stream { changes.append(change) }
        XCTAssertLessThanOrEqual(changes.count, ChangeFeed.bufferSize)
        XCTAssertTrue(changes.contains(.all), "the oldest changes were dropped without a reload")
        XCTAssertEqual(changes.last, .all, "after the drops, the subscriber's last instruction is to reload everything")
        XCTAssertTrue(changes.contains(.item("k\(count - 1)")), "the newest changes are kept")
        XCTAssertFalse(changes.contains(.item("k0")), "the oldest change was dropped")

        // A subscriber that keeps up sees every key and no reload.
        let temporary2 = try TemporaryRoot()
        let second = try SQLiteKeystore(root: temporary2.root, service: "tool", configuration: .init(changePollInterval: .seconds(3600)))
        let live = second.changes()
        var small = KeystoreBatch()
        for index in 0..<100 { small.set([1], forKey: "k\(index)") }
        try await second.commit(small)
        second.close()
        var seen: [KeystoreChange] = []
        for await change in live { seen.append(change) }
        XCTAssertEqual(seen, (0..<100).map { .item("k\($0)") })
    }

    func testStreamsEndOnClose() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        let stream = keystore.changes()
        keystore.close()
        var count = 0
        for await _ in stream { count += 1 }
        XCTAssertEqual(count, 0)
        let late = keystore.changes()
        for await _ in late { count += 1 }
        XCTAssertEqual(count, 0)
    }

    /// A database renamed over the one a keystore has open (an operator restoring a copy, or
    /// the member who owns the file): the keystore's connections stay on the old file, whose
    /// `data_version` never changes again. Its subscribers get `.all` once, and its reads
    /// fail, as its commits do, rather than go on answering from a file nobody else opens.
    func testADatabaseReplacedWhileOpenGivesAllAndFailsReads() async throws {
        let temporary = try TemporaryRoot()
        let watcher = try watcherPollingOften(temporary.root)
        defer { watcher.close() }
        try await watcher.set([1], forKey: "before")
        let stream = watcher.changes()
        try await Task.sleep(for: .milliseconds(200))  // the poller runs

        try replaceDatabase(of: watcher)
        let seen = await collectChanges(stream, within: 3) { $0.contains(.all) }
        XCTAssertTrue(seen.contains(.all), "\(seen)")
        await assertFailsForTheReplacedDatabase("a read") { _ = try await watcher.value(forKey: "before") }
    }

    /// The same without anyone subscribed (no poller runs): reads look at the path
    /// themselves, at most every 100 ms.
    func testReadsOfADatabaseReplacedWhileOpenFailWithoutASubscriber() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try watcherPollingOften(temporary.root)
        defer { keystore.close() }
        try await keystore.set([1], forKey: "before")
        try replaceDatabase(of: keystore)
        try await Task.sleep(for: DatabaseFileWatch.interval + .milliseconds(20))
        await assertFailsForTheReplacedDatabase("a read") { _ = try await keystore.value(forKey: "before") }
    }

    /// While the poller cannot read the database, its subscribers cannot be told what changed:
    /// they get `.all` at once, and again about every second while it lasts.
    func testPollsThatFailGiveAllAtOnceAndWhileTheyFail() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try watcherPollingOften(temporary.root)
        defer { keystore.close() }
        let failing = Mutex(true)
        let started = ContinuousClock.now
        let firstFailure = Mutex<Duration?>(nil)
        let feed = ChangeFeed(
            path: keystore.namespace.databasePath, origin: 1, interval: .milliseconds(50), busyTimeout: .milliseconds(50),
            knownSequence: 0, watch: nil, logger: nil,
            connect: { (path, busyTimeout) throws(KeystoreError) in
                if failing.withLock({ $0 }) {
                    firstFailure.withLock { $0 = $0 ?? ContinuousClock.now - started }
                    throw KeystoreError(.io, "the test makes the poller's connection fail")
                }
                return try SQLiteConnection(path: path, busyTimeout: busyTimeout)
            })
        defer { feed.close() }
        let stream = feed.subscribe()
        let received = Mutex<[(at: Duration, change: KeystoreChange)]>([])
        let collecting = Task {
            for await change in stream { received.withLock { $0.append((ContinuousClock.now - started, change)) } }
        }
        // Failing for 2.3 s at least, and until a second .all came (a loaded machine is slower).
        let again = await eventually(timeout: .seconds(20)) { received.withLock { $0.count } >= 2 }
        try await Task.sleep(until: started + .milliseconds(2300))
        failing.withLock { $0 = false }
        let flipped = ContinuousClock.now - started
        try await Task.sleep(for: .milliseconds(600))
        collecting.cancel()
        let ended = ContinuousClock.now - started

        let changes = received.withLock { $0 }
        XCTAssertTrue(changes.allSatisfy { $0.change == .all }, "\(changes)")
        // Counted as received (a loaded machine delays deliveries, never adds them): one at
        // once, then one a second, about 46 polls failing in 2.3 s.
        let whileFailing = changes.filter { $0.at < flipped }.map(\.at)
        let failedAt = try XCTUnwrap(firstFailure.withLock { $0 })
        XCTAssertLessThan((whileFailing.first ?? .seconds(99)) - failedAt, .milliseconds(900), "the first failed poll gave no .all at once: \(changes)")
        XCTAssertTrue(again, "no .all again while polls kept failing: \(changes)")
        XCTAssertGreaterThanOrEqual(whileFailing.count, 2, "no .all again while polls kept failing: \(changes)")
        let seconds = Int(ended.components.seconds)
        XCTAssertLessThanOrEqual(changes.count, 2 + seconds, "more than one .all a second: \(changes) in \(ended)")
    }

    /// The once-a-second limit holds across outages, not only within one poller's: a poller
    /// started for a new subscriber (the last one left) while the database still cannot be
    /// read gives its first `.all` a second after the previous poller's, not at once.
    func testAllForFailingPollsIsLimitedAcrossPollers() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try watcherPollingOften(temporary.root)
        defer { keystore.close() }
        let failures = Mutex<(first: ContinuousClock.Instant?, count: Int)>((nil, 0))
        let feed = ChangeFeed(
            path: keystore.namespace.databasePath, origin: 1, interval: .milliseconds(50), busyTimeout: .milliseconds(50),
            knownSequence: 0, watch: nil, logger: nil,
            connect: { (_, _) throws(KeystoreError) in
                failures.withLock { $0 = ($0.first ?? ContinuousClock.now, $0.count + 1) }
                throw KeystoreError(.io, "the test makes the poller's connection fail")
            })
        defer { feed.close() }

        // The stream lives only in the task: once it returns, the subscriber has left.
        let firstAll = Task { () -> KeystoreChange? in
            for await change in feed.subscribe() { return change }
            return nil
        }
        let seenFirst = await firstAll.value
        XCTAssertEqual(seenFirst, .all)
        // Its poller has stopped: no connect is tried any more.
        let settled = await eventually(timeout: .seconds(20)) {
            let before = failures.withLock { $0.count }
            try? await Task.sleep(for: .milliseconds(200))
            return failures.withLock { $0.count } == before
        }
        XCTAssertTrue(settled, "the poller went on after its last subscriber left")

        let before = failures.withLock { $0.count }
        let secondAll = Task { () -> (KeystoreChange, ContinuousClock.Instant)? in
            for await change in feed.subscribe() { return (change, ContinuousClock.now) }
            return nil
        }
        let secondSeen = await secondAll.value
        let (change, receivedAt) = try XCTUnwrap(secondSeen)
        XCTAssertEqual(change, .all)
        XCTAssertGreaterThan(failures.withLock { $0.count }, before, "no new poller ran")
        // The first .all went out after the first failed connect, so the second may not come
        // sooner than the interval after that.
        let failedAt = try XCTUnwrap(failures.withLock { $0.first })
        XCTAssertGreaterThanOrEqual(receivedAt - failedAt, ChangeFeed.failingAllInterval, "a new poller's outage gave .all at once")
    }

    /// A keystore of `root` whose change feed polls every 50 ms.
    private func watcherPollingOften(_ root: String) throws -> SQLiteKeystore {
        try SQLiteKeystore(root: root, service: "tool", keySource: testKey(), configuration: .init(changePollInterval: .milliseconds(50)))
    }
}
