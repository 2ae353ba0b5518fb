import BrokerTestSupport
import Foundation
import Logging
@testable import PostgresKeystore
import PostgresNIO
import SecureStorage
import XCTest

/// The change feed over LISTEN/NOTIFY between instances sharing a database.
final class PostgresChangeFeedTests: PostgresTestCase, @unchecked Sendable {
    func testOwnCommitsAreDeliveredAtOnce() async throws {
        let keystore = try await keystore()
        let stream = keystore.changes()
        try await keystore.set([1], forKey: "a")
        var batch = KeystoreBatch()
        batch.set([2], forKey: "b")
        batch.remove(forKey: "a")
        try await keystore.commit(batch)
        let seen = await collectChanges(stream, within: 10) { $0.isSuperset(of: [.item("a"), .item("b")]) }
        // The listener's start may add .all (commits while nobody listened are reloaded).
        XCTAssertEqual(seen.subtracting([.all]), [.item("a"), .item("b")])
    }

    /// A listening connection ended again and again just after its LISTEN (a proxy, a session
    /// timeout): the feed backs off as after a failed connect, so `.all`, which makes every
    /// client reload what it holds, comes a few times, not every 50 ms.
    func testAListenerEndedAgainAndAgainBacksOffItsReloads() async throws {
        let keystore = try await keystore { $0.reconnectDelay = .seconds(1) }  // the default
        let recorder = ChangeRecorder(keystore.changes())
        defer { recorder.stop() }
        let listening = await everyKeystoreListens()
        XCTAssertTrue(listening)
        let start = ContinuousClock.now
        var ended = 0
        // At least 3 s and 3 ends (a loaded machine may take longer to get there).
        while ContinuousClock.now - start < .seconds(3) || (ended < 3 && ContinuousClock.now - start < .seconds(30)) {
            ended += try await observedCount("""
                SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE '%pg_listening_channels%'
                """)
            try await Task.sleep(for: .milliseconds(20))
        }
        let reloads = recorder.changes.filter { $0 == .all }.count
        let elapsed = ContinuousClock.now - start
        XCTAssertGreaterThanOrEqual(ended, 3, "the listener was ended again and again")
        // Pauses of 50, 100, 200, 400, 800, then 1,000 ms: 6 reconnects in 3 s, and the first
        // LISTEN's (+ slack). Starting afresh after each (before) gave one every ~100 ms.
        var pauseEnds: [Duration] = [.milliseconds(50)]
        for pause in [100, 200, 400, 800] + Array(repeating: 1_000, count: 30) { pauseEnds.append(pauseEnds.last! + .milliseconds(pause)) }
        let allowed = pauseEnds.filter { $0 <= elapsed }.count + 3
        XCTAssertLessThanOrEqual(reloads, allowed, "\(reloads) reloads for \(ended) ended connections in \(elapsed)")
    }

    /// A database (or role) with `idle_session_timeout` (PostgreSQL 14 and later) ended the
    /// listening connection, which runs no statement while it waits, each time it ran out:
    /// every end was a reconnect, a warning and an `.all` that made every client re-read all
    /// it cached. The listening connection is set up like every other, with the timeout off.
    /// (2 s: long enough that no connection of the open goes idle that long on a busy machine.
    /// The listener usually gets a connection a call has set up already; the feed's own set-up,
    /// for one no call used, is not forced here.)
    func testTheDatabasesIdleSessionTimeoutDoesNotEndTheListener() async throws {
        let shown = try server.psqlValue("SHOW server_version_num")
        let version = try XCTUnwrap(Int(shown), "server_version_num is not a number: \(shown)")
        if version < 140000 { throw missingPrerequisite("PostgreSQL \(version) has no idle_session_timeout (a feature of 14 and later)") }
        try server.psql("ALTER DATABASE \(database!) SET idle_session_timeout = '2s'")
        let keystore = try await keystore()
        let recorder = await listeningRecorder(keystore, keystore.changes())
        defer { recorder.stop() }
        try await Task.sleep(for: .seconds(5))
        XCTAssertEqual(recorder.changes.filter { $0 == .all }.count, 1, "\(recorder.changes)")
        XCTAssertTrue(keystore.isListeningForChanges)
    }

    /// The heartbeat's `NOTIFY` reaches every listener of the database, and each one is a
    /// commit: an instance whose own commits keep reaching its listener has proved the path
    /// and sends none; an idle one sends one per check. (Counted in checks, not seconds: a
    /// loaded machine makes fewer checks, not different ones; a commit it holds up past a
    /// check makes that check send one, which is why the busy phase counts how checks passed.)
    func testAnInstanceThatCommitsSendsNoHeartbeatsAndAnIdleOneDoes() async throws {
        let (keystore, recorder, heartbeats) = try await listenerCountingHeartbeats(every: .seconds(1))
        defer { recorder.stop(); heartbeats.close() }

        // Only its own commits are on the channel: no check may pass on "others'"
        // notifications (were its own taken for others', every sixth check would send one).
        let busyStart = keystore.changeFeedChecks
        let giveUp = ContinuousClock.now.advanced(by: .seconds(60))
        var commits = 0
        while keystore.changeFeedChecks.checks - busyStart.checks < 4 && ContinuousClock.now < giveUp {
            try await keystore.set([UInt8(commits % 256)], forKey: "busy")
            commits += 1
            try await Task.sleep(for: .milliseconds(30))
        }
        let busyEnd = keystore.changeFeedChecks
        let busyChecks = busyEnd.checks - busyStart.checks
        XCTAssertGreaterThanOrEqual(busyChecks, 4, "checks while busy")
        XCTAssertEqual(busyEnd.passedOnOthers - busyStart.passedOnOthers, 0, "its own commits were taken for others' notifications")
        // Most checks pass on its own commits (one may fall before the first was heard).
        XCTAssertLessThan(busyEnd.sent - busyStart.sent, busyChecks, "heartbeats while \(commits) commits were heard")

        let idleStartHeard = heartbeats.count
        let sixChecks = await eventually(timeout: .seconds(60)) { keystore.changeFeedChecks.checks - busyEnd.checks >= 6 }
        XCTAssertTrue(sixChecks, "an idle instance keeps checking its listener")
        let idleEnd = keystore.changeFeedChecks
        let idleChecks = idleEnd.checks - busyEnd.checks
        // Every idle check but the first (which may pass on the last commit) sends one: a
        // check's own notification must not pass the next check too, which halved them.
        XCTAssertGreaterThanOrEqual(idleEnd.sent - busyEnd.sent, idleChecks - 1, "heartbeats sent in \(idleChecks) idle checks")
        let reachedTheServer = await eventually(timeout: .seconds(10)) { heartbeats.count - idleStartHeard >= idleChecks - 1 }
        XCTAssertTrue(reachedTheServer, "\(heartbeats.count - idleStartHeard) heartbeats heard on the database for \(idleChecks) idle checks")
    }

    /// Idle instances share their checks: one's notification reaches every listener and
    /// passes their checks, so an idle fleet sends about one or two per interval, not one per
    /// instance, each of which every listener had to receive (a cost that grew with the
    /// fleet's square). Every listener still hears, so none reconnects.
    func testAnIdleFleetSharesItsChecks() async throws {
        let instances = 8
        var keystores: [PostgresKeystore] = []
        var recorders: [ChangeRecorder] = []
        for _ in 0..<instances {
            let keystore = try await keystore { $0.changeFeedHeartbeat = .milliseconds(500) }
            keystores.append(keystore)
            recorders.append(ChangeRecorder(keystore.changes()))
        }
        defer { for recorder in recorders { recorder.stop() } }
        let listening = await everyKeystoreListens()
        XCTAssertTrue(listening)
        let fleet = keystores
        @Sendable func totalChecks() -> Int { fleet.map(\.changeFeedChecks.checks).reduce(0, +) }
        // Checks counted from before the counter listens, heartbeats read before the checks:
        // both err towards more checks per heartbeat than were made.
        let checksBefore = totalChecks()
        let heartbeats = try await HeartbeatCounter(try configuration())
        defer { heartbeats.close() }
        // About eight checks each (a loaded machine takes longer, not fewer).
        let enough = await eventually(timeout: .seconds(60)) { totalChecks() - checksBefore >= 8 * instances }
        XCTAssertTrue(enough, "an idle fleet keeps checking its listeners")
        let heard = heartbeats.count
        let checks = totalChecks() - checksBefore
        // Without sharing, every check sends one; shared, about one or two per interval.
        XCTAssertLessThanOrEqual(heard, checks / 2, "heartbeats on the database for \(checks) checks of \(instances) idle instances")
        XCTAssertGreaterThanOrEqual(heard, 1, "an idle fleet still sends checks")
        for (index, keystore) in keystores.enumerated() {
            let own = keystore.changeFeedChecks
            // Every sixth check in a row at most needs its own notification (a literal: the
            // product's own constant would loosen the bound with it).
            XCTAssertGreaterThanOrEqual(own.sent, own.checks / 6, "instance \(index)")
        }
        let reconnects = recorders.map { $0.changes.filter { $0 == .all }.count }
        XCTAssertEqual(reconnects, Array(repeating: 1, count: instances), "a listener reconnected (only the first LISTEN gives .all)")
    }

    /// Other instances' notifications pass five checks in a row at most: the sixth needs
    /// this instance's own commit or check, so that a listener left on a server others still
    /// write to, while this instance's pool writes to another, is still found.
    func testAListenerHearingOnlyOthersStillProvesItHearsThisInstance() async throws {
        let (keystore, recorder, heartbeats) = try await listenerCountingHeartbeats(every: .milliseconds(300))
        defer { recorder.stop(); heartbeats.close() }
        let before = keystore.changeFeedChecks
        // Notifications of other instances, every 50 ms, as a busy peer's would be.
        let peer = Task.detached { [server, database] in
            while !Task.isCancelled {
                _ = try? server!.psql("SELECT pg_catalog.pg_notify('identity_broker_changes', 'peer')", database: database!)
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        try await Task.sleep(for: .seconds(5))
        let after = keystore.changeFeedChecks
        peer.cancel()
        // Six checks of 0.15 to 0.3 s each take at most 1.8 s: at least two of its own in 5 s.
        XCTAssertGreaterThanOrEqual(heartbeats.count, 2, "checks of its own while others' notifications kept coming")
        // And one in every six checks at most (the first five may still pass on others').
        let checks = after.checks - before.checks
        XCTAssertGreaterThanOrEqual((after.sent - before.sent) * 6, checks - 5, "heartbeats sent in \(checks) checks")
    }

    /// A keystore checking its listener every `interval`, once it listens, and a counter of
    /// the heartbeats every instance on the database sends from then on.
    private func listenerCountingHeartbeats(
        every interval: Duration
    ) async throws -> (keystore: PostgresKeystore, recorder: ChangeRecorder, heartbeats: HeartbeatCounter) {
        let keystore = try await keystore { $0.changeFeedHeartbeat = interval }
        let recorder = ChangeRecorder(keystore.changes())
        let listening = await everyKeystoreListens()
        XCTAssertTrue(listening)
        return (keystore, recorder, try await HeartbeatCounter(try configuration()))
    }

    func testTwoInstancesSeeEachOthersChangesWithinASecond() async throws {
        let first = try await keystore()
        let second = try await keystore()
        let other = try await keystore(group: AccessGroup(name: "elsewhere"))
        let firstStream = first.changes()
        let secondStream = second.changes()
        let listening = await eventually { first.isListeningForChanges && second.isListeningForChanges }
        XCTAssertTrue(listening)
        try await other.set([0], forKey: "other-namespace")
        try await first.set([1], forKey: "from-first")
        try await second.set([2], forKey: "from-second")
        let both: Set<KeystoreChange> = [.item("from-first"), .item("from-second")]
        async let firstSaw = collectChanges(firstStream, within: 10) { $0.isSuperset(of: both) }
        async let secondSaw = collectChanges(secondStream, within: 10) { $0.isSuperset(of: both) }
        let (a, b) = await (firstSaw, secondSaw)
        // Each stream also holds the .all its listener's start gave.
        XCTAssertEqual(a.subtracting([.all]), both)
        XCTAssertEqual(b.subtracting([.all]), both, "another namespace's commits are not reported")
    }

    /// A commit whose caller was past its deadline when its group applied it still reaches
    /// the instance's own subscribers (which the notifications of its own origin do not).
    func testACommitThatLandsAfterItsCallerGaveUpIsStillDelivered() async throws {
        let keystore = try await keystore { $0.operationTimeout = .seconds(3) }
        // Each under the statement timeout (the operation timeout), so both apply; the second
        // waits for the first, then takes longer than its caller's time left.
        try server.psql("""
            CREATE FUNCTION slow_keys() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.key = 'slow-a' THEN PERFORM pg_sleep(2); END IF;
                IF NEW.key = 'slow-b' THEN PERFORM pg_sleep(2.5); END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER slow_keys BEFORE INSERT OR UPDATE ON identity_broker_items
            FOR EACH ROW EXECUTE FUNCTION slow_keys();
            """, database: database)
        let recorder = ChangeRecorder(keystore.changes())
        defer { recorder.stop() }
        // The first holds the commit slot; the second queues behind it, and its deadline
        // passes while its own group runs.
        async let first: Void = keystore.set([1], forKey: "slow-a")
        try await waitForSleepingStatements()
        let second = await keystoreError { try await keystore.set([2], forKey: "slow-b") }
        XCTAssertEqual(second?.code, .storeUnavailable, "the second caller gave up: \(String(describing: second))")
        try await first
        let stored = await eventually(timeout: .seconds(10)) { (try? await keystore.value(forKey: "slow-b")) == [2] }
        XCTAssertTrue(stored, "the group applied the batch after its caller gave up")
        let delivered = await eventually(timeout: .seconds(5)) { recorder.contains(.item("slow-b")) }
        XCTAssertTrue(delivered, "this instance's subscribers never learned of it: \(recorder.changes)")
    }

    /// Anyone who may connect may NOTIFY on the channel, as fast as the server sends. The
    /// feed handles each notification as its connection reads it (on the event loop), so a
    /// flood waits on the server rather than in this process, and the feed still reports a
    /// genuine change after it.
    func testAFloodOfNotificationsIsHandledAsItIsReadAndTheFeedGoesOn() async throws {
        let listener = try await keystore()
        let writer = try await keystore()
        let recorder = await listeningRecorder(listener, listener.changes())
        defer { recorder.stop() }

        let baseline = residentBytes()
        let peak = Locked(baseline)
        let sampler = Task {
            while !Task.isCancelled {
                let now = self.residentBytes()
                peak.withLock { $0 = max($0, now) }
                try? await Task.sleep(for: .milliseconds(5))
            }
        }
        // 10,000 distinct notifications of ~7.5 KB (75 MB) for this namespace, committed at
        // once, with a forged origin (each yields `.all`).
        try await Task.detached { [server, database] in
            _ = try server!.psql("""
                SELECT count(pg_notify('identity_broker_changes',
                    'ib2|4:tool0:' || repeat('z', 16) || '|' || repeat('3:abc', 1500) || i))
                FROM generate_series(1, 10000) AS i
                """, database: database!)
        }.value
        try await writer.set([1], forKey: "after-flood")
        let through = await eventually(timeout: .seconds(60)) { recorder.contains(.item("after-flood")) }
        sampler.cancel()
        XCTAssertTrue(through, "the feed reported the change that followed the flood")
        let grew = peak.withLock { $0 } - baseline
        XCTAssertLessThan(grew, 40 << 20, "the process grew by \(grew >> 20) MiB while the flood was handled")
    }

    /// This process's resident set, in bytes.
    private func residentBytes() -> Int {
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
              let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// A commit of more keys than one notification holds sends several, never `*` (which
    /// makes every other instance reload everything it caches).
    func testALargeCommitIsAnnouncedKeyByKeyInSeveralNotifications() async throws {
        let writer = try await keystore()
        let reader = try await keystore()
        let stream = reader.changes()
        let listening = await eventually { reader.isListeningForChanges }
        XCTAssertTrue(listening)
        // 300 keys as long as a Cognito identity ID: ~18 KB of records.
        let keys = (0..<300).map { "session.us-east-1:\(UUID().uuidString.lowercased())-\($0)" }
        var batch = KeystoreBatch()
        for key in keys { batch.set([1], forKey: key) }
        try await writer.commit(batch)
        let expected = Set(keys.map(KeystoreChange.item))
        let seen = await collectChanges(stream, within: 10) { $0.isSuperset(of: expected) }
        XCTAssertTrue(seen.isSuperset(of: expected), "\(expected.subtracting(seen).count) keys were not announced")
        XCTAssertEqual(seen.subtracting(expected), [.all], "only the listener's start gives .all")
    }

    /// A FederationClient's feed leaves out its own commits (it holds what it stored); every
    /// other writer's commits, and the same commits seen from another instance, still come.
    func testAWritersOwnCommitsAreLeftOutOfItsFilteredFeedOnly() async throws {
        let first = try await keystore()
        let second = try await keystore()
        let writer = KeystoreBatch.makeWriterTag()
        let filtered = first.changes(excludingWriter: writer)
        let plain = first.changes()
        let remote = second.changes()
        let listening = await eventually { first.isListeningForChanges && second.isListeningForChanges }
        XCTAssertTrue(listening)
        var mine = KeystoreBatch()
        mine.set([1], forKey: "mine")
        mine.writer = writer
        try await first.commit(mine)
        try await first.set([2], forKey: "untagged")
        try await second.set([3], forKey: "from-second")
        async let filteredSaw = collectChanges(filtered, within: 10) { $0.isSuperset(of: [.item("untagged"), .item("from-second")]) }
        async let plainSaw = collectChanges(plain, within: 10) { $0.isSuperset(of: [.item("mine"), .item("untagged")]) }
        async let remoteSaw = collectChanges(remote, within: 10) { $0.contains(.item("mine")) }
        let (a, b, c) = await (filteredSaw, plainSaw, remoteSaw)
        XCTAssertEqual(a.subtracting([.all]), [.item("untagged"), .item("from-second")], "the writer's own commit is left out")
        XCTAssertTrue(b.isSuperset(of: [.item("mine"), .item("untagged")]), "an unfiltered stream gets every commit: \(b)")
        XCTAssertTrue(c.contains(.item("mine")), "another instance sees the tagged commit: \(c)")
    }

    func testAFullBufferYieldsAll() async throws {
        let keystore = try await keystore { $0.changeBufferSize = 4 }
        let stream = keystore.changes()
        for index in 0..<10 { try await keystore.set([UInt8(index)], forKey: "k\(index)") }
        var seen: [KeystoreChange] = []
        var iterator = stream.makeAsyncIterator()
        while seen.count < 4, let change = await iterator.next() { seen.append(change) }
        XCTAssertEqual(seen.last, .all, "an overflowing buffer ends with .all: \(seen)")
    }

    func testStreamsEndOnClose() async throws {
        let keystore = try await keystore()
        let stream = keystore.changes()
        await keystore.close()
        var iterator = stream.makeAsyncIterator()
        let next = await iterator.next()
        XCTAssertNil(next)
        let error = await keystoreError { try await keystore.value(forKey: "k") }
        XCTAssertEqual(error?.code, .storeUnavailable)
    }
}

/// Counts the change feed's heartbeat notifications on a listening connection of its own.
private final class HeartbeatCounter: Sendable {
    private let seen = Locked(0)
    private let connection: PostgresConnection
    private let reading: Task<Void, Never>

    init(_ configuration: PostgresKeystore.Configuration) async throws {
        let connection = try await PostgresConnection.connect(
            configuration: .init(
                host: configuration.host, port: configuration.port, username: configuration.username,
                password: configuration.password, database: configuration.database, tls: .disable),
            id: 1, logger: Logger(label: "heartbeat-counter"))
        self.connection = connection
        let seen = self.seen
        let listening = Locked(false)
        reading = Task {
            _ = try? await connection.listen(on: "identity_broker_changes") { notifications in
                listening.withLock { $0 = true }
                for try await notification in notifications where notification.payload.hasPrefix("ibhb|") {
                    seen.withLock { $0 += 1 }
                }
            }
        }
        // LISTEN took effect once the sequence is handed over.
        while !listening.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
    }

    var count: Int { seen.withLock { $0 } }

    func close() {
        reading.cancel()
        let connection = connection
        Task { try? await connection.close() }
    }
}
