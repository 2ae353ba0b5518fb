import BrokerTestSupport
import Foundation
import InMemoryLogging
import Logging
@testable import PostgresKeystore
import PostgresNIO
import SecureStorage
import Synchronization
import XCTest

/// The server stops, restarts or drops connections while keystores are open: calls fail with
/// `storeUnavailable` naming host:port, then succeed again on the same instances; change
/// streams get `.all` after the reconnect; nothing acknowledged is lost.
final class PostgresOutageTests: PostgresTestCase, @unchecked Sendable {
    override func tearDown() async throws {
        // Leave the class's server running for the next test, whatever happened.
        try? server.startServer()
        try await super.tearDown()
    }

    func testStoreUnavailableWhileStoppedThenRecoveryWithoutRecreating() async throws {
        let keystore = try await keystore()
        try await keystore.set(Array("before".utf8), forKey: "k")
        try server.stopServer()

        let started = ContinuousClock.now
        let readError = await keystoreError { try await keystore.value(forKey: "k") }
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(8), "bounded by the operation timeout")
        XCTAssertEqual(readError?.code, .storeUnavailable)
        XCTAssertEqual(readError?.path, "127.0.0.1:\(server.port)")
        XCTAssertTrue(readError?.description.contains("127.0.0.1:\(server.port)") ?? false, "\(String(describing: readError))")
        let writeError = await keystoreError { try await keystore.set([2], forKey: "k") }
        XCTAssertEqual(writeError?.code, .storeUnavailable)
        // The password, its start, and the percent-encoded form the URL holds (`p%40ss…`).
        let encodedPassword = server.password.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        for error in [readError, writeError].compactMap({ $0 }) {
            XCTAssertNil(leakedRun(in: error.description, of: [server.password, "p@ss", encodedPassword, "p%40ss"]), "never the password: \(error)")
        }
        let openError = await keystoreError { try await self.keystore() }
        XCTAssertEqual(openError?.code, .storeUnavailable)

        try server.startServer()
        let recovered = await eventually(timeout: .seconds(20)) { (try? await keystore.value(forKey: "k")) == Array("before".utf8) }
        XCTAssertTrue(recovered, "the same instance reads again once the server is back")
        try await keystore.set(Array("after".utf8), forKey: "k")
        let value = try await keystore.value(forKey: "k")
        XCTAssertEqual(value, Array("after".utf8))
    }

    /// Without keep-alive queries (the default), connections the server ended while idle are
    /// replaced: the next calls succeed on new connections, with no error, even when the pool
    /// has not yet seen every old one closed (each call may run again, once per connection).
    func testIdleConnectionsTheServerEndedAreReplacedOnTheNextCalls() async throws {
        let keystore = try await keystore()
        try await keystore.set(Array("before".utf8), forKey: "k")
        let ended = try server.psqlValue("""
            SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity
            WHERE datname = '\(database!)' AND pid <> pg_backend_pid()
            """)
        XCTAssertGreaterThanOrEqual(Int(ended) ?? 0, 2, "the keystore's connections were ended")

        for round in 0..<3 {
            let value = try await keystore.value(forKey: "k")
            XCTAssertEqual(value, Array("before".utf8), "round \(round)")
            try await keystore.set(Array("round-\(round)".utf8), forKey: "r\(round)")
        }
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["k", "r0", "r1", "r2"])
    }

    /// ``PostgresKeystore/Configuration/keepAliveInterval`` makes idle connections run the
    /// keep-alive query. The silent keystore is the control: the count sees no other query.
    /// (postgres-nio's own default, every 30 s, would stay silent here too; the default is
    /// guarded by `PostgresConfigurationTests.testThePoolRunsKeepAliveQueriesOnlyWithAnInterval`.)
    func testIdleConnectionsRunKeepAliveQueriesOnlyWhenAskedTo() async throws {
        let keepAlives = "state = 'idle' AND query = 'SELECT 1;'"
        let silent = try await keystore(service: "silent")
        try await silent.set([1], forKey: "k")
        try await Task.sleep(for: .milliseconds(900))
        let silentQueries = try await activityCount(keepAlives)
        XCTAssertEqual(silentQueries, 0)
        await silent.close()

        let kept = try await keystore(service: "kept") { $0.keepAliveInterval = .milliseconds(200) }
        try await kept.set([1], forKey: "k")
        let keptQueries = await eventually(timeout: .seconds(10), every: .milliseconds(20)) { (try? await self.activityCount(keepAlives)) ?? 0 >= 1 }
        XCTAssertTrue(keptQueries, "an idle connection ran the keep-alive query")
    }

    func testStreamsGetAllAfterARestartAndFollowOtherInstancesAgain() async throws {
        let writer = try await keystore()
        let logs = InMemoryLogHandler()
        let watcher = try await keystore(logger: Logger(label: "watcher") { _ in logs })
        let recorder = ChangeRecorder(watcher.changes())
        defer { recorder.stop() }
        // Every LISTEN that succeeds reports `.all`, the first one included.
        let alls: @Sendable () -> Int = { recorder.changes.filter { $0 == .all }.count }
        let listening = await eventually { watcher.isListeningForChanges && alls() >= 1 }
        XCTAssertTrue(listening)

        let allsBefore = alls()
        try server.restart()
        let all = await eventually(timeout: .seconds(20)) { alls() > allsBefore }
        XCTAssertTrue(all, "a reconnected feed reports .all: \(recorder.changes)")

        let written = await eventually(timeout: .seconds(20)) { (try? await writer.set([1], forKey: "after-restart")) != nil }
        XCTAssertTrue(written, "the writer recovered")
        let item = await eventually(timeout: .seconds(5)) { recorder.contains(.item("after-restart")) }
        XCTAssertTrue(item, "the feed follows the other instance again: \(recorder.changes)")
        // Someone is told that this instance heard nobody for a while: once, however many
        // reconnections failed meanwhile.
        let warnings = logs.entries.filter { $0.level == .warning && $0.message.description.contains("change feed lost its connection") }
        XCTAssertEqual(warnings.count, 1, "\(logs.entries.map(\.message))")
    }

    /// The feed's connection stays open but carries nothing (a NAT or firewall that dropped
    /// the flow, a server host gone without a word): no error ever comes, so only the
    /// heartbeat notices. The feed then reconnects, reports `.all`, and follows the other
    /// instance again.
    func testAFeedWhoseConnectionFallsSilentReconnects() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        defer { proxy.stop() }
        let (writer, recorder) = try await watcher(behind: proxy)
        defer { recorder.stop() }
        let allsBefore = recorder.changes.filter { $0 == .all }.count

        proxy.freezeExisting()
        try await writer.set([1], forKey: "while-silent")
        let reconnected = await eventually(timeout: .seconds(10)) { recorder.changes.filter { $0 == .all }.count > allsBefore }
        XCTAssertTrue(reconnected, "a silent feed connection is noticed and replaced: \(recorder.changes)")

        try await writer.set([2], forKey: "after-reconnect")
        let followed = await eventually(timeout: .seconds(5)) { recorder.contains(.item("after-reconnect")) }
        XCTAssertTrue(followed, "the feed follows the other instance again: \(recorder.changes)")
    }

    /// The feed's connection answers every statement, but notifications stop reaching it (a
    /// listener left on a server the writers no longer use after a failover, a pooler that
    /// does not carry `LISTEN`): a `SELECT 1` finds nothing wrong. The heartbeat's own
    /// notification does not arrive either, so the feed reconnects and reports `.all` (a
    /// client then re-reads what it holds), and follows the other instance again once
    /// notifications flow.
    func testAFeedThatStopsHearingNotificationsReconnects() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port), postgres: true)
        defer { proxy.stop() }
        let (writer, recorder) = try await watcher(behind: proxy)
        defer { recorder.stop() }
        let alls: @Sendable () -> Int = { recorder.changes.filter { $0 == .all }.count }
        let allsBefore = alls()
        try await Task.sleep(for: .milliseconds(1500))
        XCTAssertEqual(alls(), allsBefore, "a feed that hears its heartbeats is kept: \(recorder.changes)")

        proxy.dropNotifications(true)
        try await writer.set([1], forKey: "unheard")
        let reconnected = await eventually(timeout: .seconds(10)) { alls() > allsBefore }
        XCTAssertTrue(reconnected, "a feed that no longer hears notifications is replaced: \(recorder.changes)")
        XCTAssertFalse(recorder.contains(.item("unheard")), "the proxy let a notification through")

        proxy.dropNotifications(false)
        // A fresh key each try: one written while the feed reconnects comes only as `.all`.
        let attempt = Locked(0)
        let followed = await eventually(timeout: .seconds(15)) {
            let key = "heard-\(attempt.withLock { $0 += 1; return $0 })"
            try? await writer.set([2], forKey: key)
            return await eventually(timeout: .seconds(1)) { recorder.contains(.item(key)) }
        }
        XCTAssertTrue(followed, "the feed follows the other instance again: \(recorder.changes)")
    }

    /// A keystore that writes directly, and the changes of another whose connections go
    /// through `proxy`, with a heartbeat every 300 ms, once it listens (its first `.all`
    /// recorded).
    private func watcher(behind proxy: FreezableTCPProxy) async throws -> (writer: PostgresKeystore, recorder: ChangeRecorder) {
        let writer = try await keystore()
        let watcher = try await keystore {
            $0.port = Int(proxy.port)
            $0.changeFeedHeartbeat = .milliseconds(300)
            $0.operationTimeout = .seconds(1)
        }
        return (writer, await listeningRecorder(watcher, watcher.changes()))
    }

    /// Calls that run out of time on connections that carry nothing more must not hold them
    /// for good: with every pooled connection silent, a call fails with a timeout, and later
    /// ones run on new connections (kept, the two silent ones would have held the pool).
    func testCallsOnSilentConnectionsTimeOutAndTheirConnectionsAreReplaced() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        defer { proxy.stop() }
        let keystore = try await keystore {
            $0.port = Int(proxy.port)
            $0.maximumConnections = 2
            $0.operationTimeout = .seconds(1)
        }
        try await keystore.set([1], forKey: "k")
        proxy.freezeExisting()
        let error = await keystoreError { _ = try await keystore.value(forKey: "k") }
        XCTAssertEqual(error?.code, .storeUnavailable, "\(String(describing: error))")
        let recovered = await eventually(timeout: .seconds(10)) { (try? await keystore.value(forKey: "k")) == [1] }
        XCTAssertTrue(recovered, "new connections replace the silent ones")
    }

    /// A commit the network held back past its fence is refused when it reaches the server.
    /// Here a remove's `CALL` is held on its way (a path that starts dropping packets), its
    /// caller is told it failed, another instance writes the session and is told it
    /// succeeded, and then the path heals: the remove reaches the server seconds later (a
    /// kernel keeps retransmitting for up to ~15 minutes, even after the connection was
    /// closed). Unfenced, it deleted the acknowledged write.
    func testACommitTheNetworkHoldsBackPastItsFenceIsRefusedWhenItArrives() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        defer { proxy.stop() }
        let held = try await keystore(behind: proxy)
        let other = try await keystore()
        try await held.set([1], forKey: "session.a", version: 1)
        try await holdBack("CALL ", through: proxy, { try await held.remove(forKey: "session.a") }) {
            let written = try await other.set([2], forKey: "session.a", version: 2)
            XCTAssertTrue(written)
        }
        let kept = try await other.value(forKey: "session.a")
        XCTAssertEqual(kept, [2], "the held-back remove deleted an acknowledged write")
    }

    /// The same for a commit in a transaction of its own (a batch that names a key twice):
    /// a `COMMIT` the network holds back must not commit when it arrives seconds later. The
    /// server ends a session left idle in its transaction for the operation timeout.
    func testATransactionsCommitTheNetworkHoldsBackNeverCommits() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        defer { proxy.stop() }
        let held = try await keystore(behind: proxy)
        try await held.set([1], forKey: "session.a")
        var batch = KeystoreBatch()
        batch.remove(forKey: "session.a")
        batch.set([9], forKey: "session.a")
        try await holdBack("COMMIT", through: proxy) { _ = try await held.commit(batch) }
        let other = try await keystore()
        let kept = try await other.value(forKey: "session.a")
        XCTAssertEqual(kept, [1], "the held-back COMMIT committed after its caller was told it failed")
    }

    /// A keystore whose connections go through `proxy`, with a one-second operation timeout.
    private func keystore(behind proxy: FreezableTCPProxy) async throws -> PostgresKeystore {
        try await keystore {
            $0.port = Int(proxy.port)
            $0.operationTimeout = .seconds(1)
        }
    }

    /// Holds what `call` sends from where it contains `pattern` (a path that starts dropping
    /// packets there), expects `call` to fail as `storeUnavailable`, runs `meanwhile`, and two
    /// seconds later (past a one-second fence) lets the held bytes through; returns once the
    /// held connection has ended both ways, what it held having reached the server.
    private func holdBack(
        _ pattern: String, through proxy: FreezableTCPProxy, _ call: () async throws -> Void,
        meanwhile: () async throws -> Void = {}
    ) async throws {
        proxy.freeze(whenAClientSends: pattern)
        let error = await keystoreError { try await call() }
        XCTAssertEqual(error?.code, .storeUnavailable, "\(String(describing: error))")
        try await meanwhile()
        try await Task.sleep(for: .seconds(2))
        XCTAssertEqual(proxy.heldConnections, 1, "the call failed before it sent \(pattern): nothing was held back")
        proxy.thaw()
        let delivered = await eventually(timeout: .seconds(10)) { proxy.thawedConnectionsEnded }
        XCTAssertTrue(delivered, "what was held back never reached the server")
    }

    /// A server whose clock moved forward since a connection read it refuses that
    /// connection's commits as late: the refusal comes back at once, so the connection reads
    /// the clock again and the commit applies (once), instead of failing every commit on it.
    func testACommitRefusedAtOnceAfterTheServersClockMovedRunsAgain() async throws {
        let keystore = try await keystore()
        try await keystore.set([0], forKey: "warm")
        let (namespace, origin) = (keystore.namespace, keystore.origin)
        let call = PostgresSchema.commitCall(inSchema: "public")
        let (applied, corrected) = try await keystore.perform("a commit") { connection, logger in
            let current = try XCTUnwrap(ConnectionSetup.current)
            let read = try XCTUnwrap(current.setup.clock(of: current.connection))
            // As if the server's clock had jumped a minute ahead since it was read.
            current.setup.record(ServerClock(microseconds: read.microseconds - 60_000_000, answeredAt: read.answeredAt), for: current.connection)
            let applied = try await PostgresKeystore.applyDistinct(
                [[.set(key: "session.b", sealed: [1, 2, 3], version: 1)]], namespace: namespace, origin: origin, call: call,
                allowance: .seconds(5), on: connection, logger: logger)
            return (applied, try XCTUnwrap(current.setup.clock(of: current.connection)).microseconds)
        }
        XCTAssertEqual(applied, [[true]])
        let serverNow = Int64(try server.psqlValue("SELECT \(ServerClock.sql)"))!
        XCTAssertLessThan(abs(serverNow - corrected), 30_000_000, "the connection read the server's clock again")
        let stored = try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE key = 'session.b'", database: database)
        XCTAssertEqual(stored, "1")

        // A reading behind by a minute (a server clock stepped back since: every fence a
        // minute loose) is put right by the next commit, which returns the server's clock.
        let refreshed = try await keystore.perform("another commit") { connection, logger in
            let current = try XCTUnwrap(ConnectionSetup.current)
            let read = try XCTUnwrap(current.setup.clock(of: current.connection))
            current.setup.record(ServerClock(microseconds: read.microseconds + 60_000_000, answeredAt: read.answeredAt), for: current.connection)
            _ = try await PostgresKeystore.applyDistinct(
                [[.set(key: "session.c", sealed: [1, 2, 3], version: 1)]], namespace: namespace, origin: origin, call: call,
                allowance: .seconds(5), on: connection, logger: logger)
            return try XCTUnwrap(current.setup.clock(of: current.connection)).microseconds
        }
        let serverLater = Int64(try server.psqlValue("SELECT \(ServerClock.sql)"))!
        XCTAssertLessThan(abs(serverLater - refreshed), 30_000_000, "every commit brings the server's clock back")

        // A commit that waited for a row lock brings the clock as it ended, not as it started
        // (which would make the connection's next fence early by the wait): its reading is no
        // older than the row's release.
        let released = Locked<Int64>(0)
        let ended = try await behindAHeldRow("session.c", meanwhile: { holder, logger in
            try await Task.sleep(for: .milliseconds(300))
            let rows = try await holder.query("SELECT \(unescaped: ServerClock.sql)", logger: logger).collect()
            let clock = try rows[0].decode(Int64.self)
            released.withLock { $0 = clock }
        }) {
            try await keystore.perform("a commit behind a lock") { connection, logger in
                let current = try XCTUnwrap(ConnectionSetup.current)
                _ = try await PostgresKeystore.applyDistinct(
                    [[.set(key: "session.c", sealed: [4, 5, 6], version: 2)]], namespace: namespace, origin: origin, call: call,
                    allowance: .seconds(10), on: connection, logger: logger)
                return try XCTUnwrap(current.setup.clock(of: current.connection)).microseconds
            }
        }
        XCTAssertGreaterThanOrEqual(ended, released.withLock { $0 }, "the reading is the clock as the commit ended, after the row's release")
    }

    /// A commit that applied on the server but whose answer never came back fails its
    /// caller, and its outcome is unknown to the keystore too. Its notification, were it to
    /// arrive, is this instance's own, which the feed skips; so the keystore tells its own
    /// subscribers (another client in this process) of the keys at once.
    func testACommitWhoseAnswerIsLostIsStillReportedToThisInstancesSubscribers() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        defer { proxy.stop() }
        let keystore = try await keystore {
            $0.port = Int(proxy.port)
            $0.operationTimeout = .seconds(2)
        }
        try sleepOnInsert(of: "lost", seconds: 0.5)
        let recorder = await listeningRecorder(keystore, keystore.changes())
        defer { recorder.stop() }

        let error = try await loseTheAnswer(toSetting: "lost", on: keystore, through: proxy)
        XCTAssertEqual(error?.code, .storeUnavailable, "\(String(describing: error))")
        XCTAssertEqual(try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE key = 'lost'", database: database), "1")
        let told = await eventually(timeout: .seconds(3)) { recorder.contains(.item("lost")) }
        XCTAssertTrue(told, "the subscribers never learned of a commit that applied: \(recorder.changes)")
    }

    /// For a while after such a commit, this instance's own notifications naming its keys
    /// are delivered like another's, so that one landing late reaches even the subscriber
    /// that excluded its writer (the writing client itself, which re-reads what it could not
    /// confirm); its notifications of other keys are still skipped.
    func testAfterALostAnswerThisInstancesOwnNotificationsOfItsKeysAreDelivered() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        defer { proxy.stop() }
        let keystore = try await keystore {
            $0.port = Int(proxy.port)
            $0.operationTimeout = .seconds(1)
            $0.changeFeedHeartbeat = .milliseconds(300)
            // The feed's and one other: once a commit succeeds, no frozen one is left.
            $0.maximumConnections = 2
        }
        try sleepOnInsert(of: "lost", seconds: 0.5)
        let writer: UInt64 = 7
        let recorder = await listeningRecorder(keystore, keystore.changes(excludingWriter: writer))
        defer { recorder.stop() }

        let allsBefore = recorder.changes.filter { $0 == .all }.count
        _ = try await loseTheAnswer(toSetting: "lost", on: keystore, through: proxy)
        let reconnected = await eventually(timeout: .seconds(10)) { recorder.changes.filter { $0 == .all }.count > allsBefore }
        XCTAssertTrue(reconnected, "the feed's silent connection was replaced: \(recorder.changes)")
        try server.psql("DROP TRIGGER slow_insert ON identity_broker_items", database: database)
        // Commits run on a live connection again (a failed one would report its key itself).
        let committing = await eventually(timeout: .seconds(10)) { (try? await keystore.set([0], forKey: "probe")) != nil }
        XCTAssertTrue(committing)

        // The writer's commits, as a late landing of the lost one would notify.
        let lostBefore = recorder.changes.filter { $0 == .item("lost") }.count
        for key in ["lost", "other"] {
            var batch = KeystoreBatch()
            batch.set([2], forKey: key)
            batch.writer = writer
            try await keystore.commit(batch)
        }
        let heard = await eventually(timeout: .seconds(3)) { recorder.changes.filter { $0 == .item("lost") }.count > lostBefore }
        XCTAssertTrue(heard, "the instance's own notification of an uncertain key was skipped: \(recorder.changes)")
        try await Task.sleep(for: .milliseconds(300))
        XCTAssertFalse(recorder.contains(.item("other")), "its own notifications of other keys are skipped")
    }

    /// Sets `key` (made slow by ``sleepOnInsert(of:seconds:)``) and freezes every connection
    /// through `proxy` while the server runs the commit: it applies, and neither its answer
    /// nor the feed's notification of it ever arrives. Returns the caller's error.
    private func loseTheAnswer(toSetting key: String, on keystore: PostgresKeystore, through proxy: FreezableTCPProxy) async throws -> KeystoreError? {
        async let failure = keystoreError { try await keystore.set([1], forKey: key) }
        try await waitForSleepingStatements()
        proxy.freezeExisting()
        return await failure
    }

    /// Makes inserting `key` take `seconds` on the server (under the operation timeout, so
    /// it commits).
    private func sleepOnInsert(of key: String, seconds: Double) throws {
        try server.psql("""
            CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.key = '\(key)' THEN PERFORM pg_sleep(\(seconds)); END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER slow_insert BEFORE INSERT OR UPDATE ON identity_broker_items
            FOR EACH ROW EXECUTE FUNCTION slow_insert();
            """, database: database)
    }

    /// Whether `body` threw.
    private func throwsAnything(_ body: () async throws -> Void) async -> Bool {
        do {
            try await body()
            return false
        } catch {
            return true
        }
    }

    /// Puts a pool aimed at a port where nothing listens in place of `keystore`'s, as one still
    /// in postgres-nio's backoff after a long outage would be; returns the replacements so far.
    private func aimAtNowhere(_ keystore: PostgresKeystore) throws -> Int {
        let nowhere = try FreezableTCPProxy(targetPort: UInt16(server.port))
        nowhere.stop()
        var lagging = keystore.configuration
        lagging.port = Int(nowhere.port)
        keystore.pool.replaceForTesting(aimingAt: lagging)
        return keystore.pool.replacements
    }

    /// A keystore holding `k` = [1] (a 5 s operation timeout, a 1 s connect timeout: the
    /// replacement has handed out nothing, so its slow leases wait for both) whose pool is
    /// aimed where nothing listens (``aimAtNowhere(_:)``), with no change stream; and the
    /// replacements so far.
    private func laggingKeystore(reconnectDelay: Duration) async throws -> (PostgresKeystore, replaced: Int) {
        let keystore = try await keystore {
            $0.operationTimeout = .seconds(5)
            $0.connectTimeout = .seconds(1)
            $0.reconnectDelay = reconnectDelay
        }
        try await keystore.set([1], forKey: "k")
        return (keystore, try aimAtNowhere(keystore))
    }

    /// postgres-nio's pool backs off up to a minute between connection attempts, so after a
    /// long outage it could lag the server's return by that much. A pool aimed at a port
    /// where nothing listens stands for one in that state: the keystore sees that the server
    /// itself takes connections, and calls soon succeed on a new pool; the change feed
    /// listens again and follows another instance. Nothing is reopened.
    func testAPoolThatLagsBehindTheServersReturnIsReplaced() async throws {
        let writer = try await keystore()
        let (keystore, recorder) = try await listeningKeystore()
        defer { recorder.stop() }

        let replaced = try aimAtNowhere(keystore)

        let recovered = await eventually(timeout: .seconds(5)) { (try? await keystore.value(forKey: "k")) == [1] }
        XCTAssertTrue(recovered, "a new pool serves once the server is seen to take connections")
        XCTAssertEqual(keystore.pool.replacements, replaced + 1, "replaced once")
        XCTAssertEqual(keystore.pool.current.number, replaced + 1)

        let listensAgain = await eventually(timeout: .seconds(5)) { keystore.isListeningForChanges }
        XCTAssertTrue(listensAgain, "the change feed listens on the new pool")
        let followed = await eventually(timeout: .seconds(5)) {
            _ = try? await writer.set([2], forKey: "after-replacement")
            return recorder.contains(.item("after-replacement"))
        }
        XCTAssertTrue(followed, "the feed follows the other instance again: \(recorder.changes)")
        try await keystore.set([3], forKey: "k")
        let value = try await writer.value(forKey: "k")
        XCTAssertEqual(value, [3])
    }

    /// A call whose connection came from a pool that was replaced meanwhile (its task ran
    /// late, after the lease) hands it back unused: it used to start on it, and the old pool's
    /// shutdown, ~40 ms after the replacement when no call was counted, could close the
    /// connection under its statement (a retry, or "outcome unknown" for a commit). The
    /// keystore's own calls then run on the new pool.
    func testACallThatLeasesFromAReplacedPoolDoesNotStartOnIt() async throws {
        let keystore = try await keystore()
        try await keystore.set([1], forKey: "k")
        let old = keystore.pool.current
        keystore.pool.replaceForTesting(aimingAt: keystore.configuration)
        let started = Locked(false)
        // Fails either way: the pool hands a connection out and the call sees it retired, or
        // the pool has shut down already.
        let failed = await throwsAnything {
            try await keystore.pool.withConnection(on: old) { _ in started.withLock { $0 = true } }
        }
        XCTAssertTrue(failed, "a call started on a connection of the replaced pool")
        XCTAssertFalse(started.withLock { $0 }, "the call's body ran on the replaced pool")
        let value = try await keystore.value(forKey: "k")
        XCTAssertEqual(value, [1])
        try await keystore.set([2], forKey: "k")
        XCTAssertEqual(keystore.pool.current.number, old.number + 1)
    }

    /// A keystore with no change stream learns of an outage only from its calls. Its first
    /// call after the server's return, on a pool still waiting out its backoff (one aimed at
    /// a port where nothing listens), waits past the reconnect delay: the pool watches,
    /// finds the server there and replaces itself, and the call runs on the new pool. It used
    /// to fail at its deadline, and the calls just after it too.
    func testAnIdleKeystoresFirstCallAfterTheServersReturnRunsOnANewPool() async throws {
        let (keystore, replaced) = try await laggingKeystore(reconnectDelay: .milliseconds(200))
        XCTAssertEqual(keystore.pool.watchesStarted, 0)

        let first = try await keystore.value(forKey: "k")
        XCTAssertEqual(first, [1])
        XCTAssertEqual(keystore.pool.watchesStarted, 1, "the slow lease made the pool watch")
        XCTAssertEqual(keystore.pool.replacements, replaced + 1, "replaced once")
        try await keystore.set([2], forKey: "k")
        let second = try await keystore.value(forKey: "k")
        XCTAssertEqual(second, [2])
    }

    /// A new pool's first connection over a slow link (here 600 ms, three times the reconnect
    /// delay) is not taken for an outage: the first call's wait includes making it. Since
    /// the keystore opens on a connection of its own, its pool starts cold, and this wait
    /// started a watch, a probe login and possibly a replacement of a pool about to serve.
    func testAFreshPoolsFirstSlowConnectionIsNoOutage() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        defer { proxy.stop() }
        proxy.delayNewConnections(by: .milliseconds(600))
        let keystore = try await keystore {
            $0.port = Int(proxy.port)
            $0.reconnectDelay = .milliseconds(200)
            $0.minimumConnections = 0
        }
        try await keystore.set([1], forKey: "k")
        let value = try await keystore.value(forKey: "k")
        XCTAssertEqual(value, [1])
        XCTAssertEqual(keystore.pool.watchesStarted, 0, "the first connection's set-up started a watch for the server")
        XCTAssertEqual(keystore.pool.replacements, 0)
    }

    /// Only a pool that cannot hand out connections is replaced: a statement that runs out of
    /// time on a working connection, with nothing else going on, leaves the pool in place.
    func testAStatementThatTimesOutOnAWorkingServerKeepsThePool() async throws {
        let keystore = try await keystore { $0.operationTimeout = .seconds(1) }
        try await keystore.set([1], forKey: "k")
        try createItemTrigger("slow_write", "IF NEW.key = 'slow' THEN PERFORM pg_sleep(3); END IF;")
        let error = await keystoreError { try await keystore.set([2], forKey: "slow") }
        XCTAssertEqual(error?.code, .storeUnavailable, "\(String(describing: error))")
        try await assertPoolKept(keystore)
    }

    /// A commit whose connection dies under `COMMIT` is trouble (the keystore watches for the
    /// server), but with the server up and the pool answering a `SELECT 1`, the pool stays,
    /// even with nothing else served meanwhile.
    func testTroubleOnAPoolThatStillAnswersKeepsThePool() async throws {
        let keystore = try await keystore { $0.reconnectDelay = .milliseconds(200) }
        try await keystore.set([1], forKey: "k")
        try createItemTrigger(
            "lose_at_commit", atCommit: true,
            "IF NEW.key = 'lost' THEN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(1); END IF;")
        let error = await keystoreError { try await keystore.set([2], forKey: "lost") }
        XCTAssertTrue(error?.reason.contains("outcome is unknown") ?? false, "\(String(describing: error))")
        try await assertPoolKept(keystore)
    }

    /// A pool whose calls wait behind slow statements (every connection busy, calls timing
    /// out while waiting for one) still hands connections out: it is kept, and the change
    /// feed's connection with it.
    func testAPoolWhoseCallsWaitBehindSlowStatementsIsKept() async throws {
        let (keystore, recorder) = try await listeningKeystore { $0.maximumConnections = 2 }
        defer { recorder.stop() }
        try createItemTrigger("slow_write", "IF NEW.key LIKE 'slow%' THEN PERFORM pg_sleep(5); END IF;")
        let stop = Locked<Bool>(false)
        let timedOut = Locked<Int>(0)
        let load = Task {
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<4 {
                    group.addTask {
                        var index = 0
                        while !stop.withLock({ $0 }) {
                            do {
                                if worker == 0 {
                                    try await keystore.set([1], forKey: "slow\(index)")
                                } else {
                                    _ = try await keystore.value(forKey: "k")
                                }
                            } catch {
                                timedOut.withLock { $0 += 1 }
                            }
                            index += 1
                        }
                    }
                }
            }
        }
        try await Task.sleep(for: .seconds(4))
        stop.withLock { $0 = true }
        await load.value
        XCTAssertGreaterThan(timedOut.withLock { $0 }, 0, "calls timed out waiting behind the slow statements")
        XCTAssertEqual(keystore.pool.replacements, 0)
        XCTAssertEqual(recorder.changes.filter { $0 == .all }.count, 1, "the feed kept its connection: \(recorder.changes)")
    }

    /// A caller who gives up its own call while it waits for a connection of a busy pool says
    /// nothing about the server: the pool does not watch for its return (a detached task
    /// that finds the pool busy, and a debug line, for every such cancellation). A wait its
    /// deadline ends still does (the outage tests: the pool is replaced after such waits);
    /// the cancelled one here ends well before the reconnect delay, and the lock outlasts
    /// it, so that a cancelled lease postgres-nio kept queued would show too.
    func testACallersCancellationIsNoSignOfTrouble() async throws {
        let busy = try await keystoreWithBothConnectionsHeld(reconnectDelay: .seconds(1))
        defer { busy.release() }
        let keystore = busy.keystore
        let listing = Task { try await keystore.keys() }
        try await Task.sleep(for: .milliseconds(200))
        listing.cancel()
        let cancelled = await keystoreError { try await listing.value }
        XCTAssertEqual(cancelled?.code, .storeUnavailable, "the listing waited for a connection and was cancelled: \(String(describing: cancelled))")
        // Held past the reconnect delay after the cancellation.
        try await Task.sleep(for: .milliseconds(1500))
        busy.release()
        try await busy.released()
        try await Task.sleep(for: .milliseconds(200))
        XCTAssertEqual(keystore.pool.watchesStarted, 0, "a caller's cancellation started a watch for the server")
    }

    /// A caller who gives up sooner than the reconnect delay, on a pool that handed out no
    /// connection and holds none while it waited (one still in postgres-nio's backoff, here
    /// aimed where nothing listens), does make it watch: callers that all give up that soon
    /// would otherwise leave the pool waiting out its backoff. The watch replaces it with
    /// no further call.
    func testACallersCancellationOnAPoolThatHandsOutNothingMakesItWatch() async throws {
        let (keystore, replaced) = try await laggingKeystore(reconnectDelay: .seconds(1))
        // A listing: a read of one key is shared with other readers, which no one caller's
        // cancellation ends.
        let listing = Task { try await keystore.keys() }
        try await Task.sleep(for: .milliseconds(150))
        listing.cancel()
        let cancelled = await keystoreError { try await listing.value }
        XCTAssertEqual(cancelled?.code, .storeUnavailable, "\(String(describing: cancelled))")
        // The caller is resumed at once; the wait it ended winds down on its own.
        let watched = await eventually(timeout: .seconds(10)) { keystore.pool.watchesStarted == 1 }
        XCTAssertTrue(watched, "the cancelled wait on a pool that hands out nothing started a watch")
        let replacedByItself = await eventually(timeout: .seconds(5)) { keystore.pool.replacements == replaced + 1 }
        XCTAssertTrue(replacedByItself, "the watch replaced the pool")
        let value = try await keystore.value(forKey: "k")
        XCTAssertEqual(value, [1])
    }

    /// A call made from a task already cancelled (clean-up after a request its client left)
    /// never waits for a connection, so it says nothing about the pool: no watch, whose probe
    /// connection and `SELECT 1` would load a healthy server for every such call.
    func testACallMadeAlreadyCancelledStartsNoWatch() async throws {
        let keystore = try await keystore { $0.reconnectDelay = .seconds(1) }
        try await keystore.set([1], forKey: "k")
        let idle = await eventually { keystore.pool.watchesStarted == 0 }
        XCTAssertTrue(idle)
        let listing = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await keystore.keys()
        }
        let error = await keystoreError { try await listing.value }
        XCTAssertEqual(error?.code, .storeUnavailable, "\(String(describing: error))")
        try await Task.sleep(for: .milliseconds(300))
        XCTAssertEqual(keystore.pool.watchesStarted, 0, "a call made already cancelled started a watch")
    }

    /// A keystore holding `k` = [1] with two connections, both held by listings that wait
    /// behind a lock on the items table (the server says so) until `release` is called;
    /// `released` waits for them and the lock.
    private func keystoreWithBothConnectionsHeld(
        reconnectDelay: Duration
    ) async throws -> (keystore: PostgresKeystore, release: @Sendable () -> Void, released: @Sendable () async throws -> Void) {
        let keystore = try await keystore {
            $0.operationTimeout = .seconds(30)
            $0.maximumConnections = 2
            $0.reconnectDelay = reconnectDelay
        }
        try await keystore.set([1], forKey: "k")
        let lock = try await lockItems()
        let blocked = (0..<2).map { _ in Task { try await keystore.keys() } }
        let bothWait = await eventually(timeout: .seconds(20), every: .milliseconds(20)) { (try? await self.activityCount("wait_event_type = 'Lock'")) == 2 }
        XCTAssertTrue(bothWait, "both connections wait behind the lock")
        return (keystore, lock.release, {
            for task in blocked {
                let keys = try await task.value
                XCTAssertEqual(keys, ["k"])
            }
            try await lock.held.value
        })
    }

    /// Takes an exclusive lock on the items table on a connection of another keystore
    /// instance (its own pool, so nothing of the keystore under test counts it), and returns
    /// once the server has granted it; the lock is held until `release` is called (or 30 s).
    private func lockItems() async throws -> (held: Task<Void, any Error>, release: @Sendable () -> Void) {
        let holder = try await keystore { $0.operationTimeout = .seconds(40) }
        let (granted, grant) = AsyncStream<Void>.makeStream()
        let (released, release) = AsyncStream<Void>.makeStream()
        let lock = Task {
            // A holder that fails before the lock is granted must not leave the caller waiting.
            defer { grant.finish() }
            try await holder.perform("holding a lock") { connection, logger in
                try await PostgresKeystore.transaction(on: connection, logger: logger) {
                    try await connection.query("LOCK TABLE identity_broker_items IN ACCESS EXCLUSIVE MODE", logger: logger)
                    grant.yield()
                    await withTaskGroup(of: Void.self) { group in
                        group.addTask { for await _ in released { return } }
                        group.addTask { try? await Task.sleep(for: .seconds(30)) }
                        await group.next()
                        group.cancelAll()
                    }
                }
            }
        }
        for await _ in granted { break }
        return (lock, { release.finish() })
    }

    /// Calls that wait longer than the reconnect delay for a pool whose connections are all
    /// held (behind a lock) start no watch: the pool is busy, and a watch would find just
    /// that (one after another, every pause, while the wait lasts).
    func testAWaitBehindHeldConnectionsStartsNoWatch() async throws {
        let busy = try await keystoreWithBothConnectionsHeld(reconnectDelay: .milliseconds(300))
        defer { busy.release() }
        let keystore = busy.keystore
        let began = Locked<ContinuousClock.Instant?>(nil)
        let listing = Task {
            began.withLock { $0 = .now }
            return try await keystore.keys()
        }
        let running = await eventually(timeout: .seconds(10)) { began.withLock { $0 } != nil }
        XCTAssertTrue(running)
        let start = try XCTUnwrap(began.withLock { $0 })
        // Waiting more than twice the reconnect delay for a connection.
        try await Task.sleep(until: start + .milliseconds(700))
        busy.release()
        let keys = try await listing.value
        XCTAssertEqual(keys, ["k"])
        XCTAssertGreaterThan(ContinuousClock.now - start, .milliseconds(600), "the listing waited past the reconnect delay")
        try await busy.released()
        XCTAssertEqual(keystore.pool.watchesStarted, 0, "a wait behind held connections started a watch")
    }

    /// Opens a keystore holding `k` = [1] (a 1 s operation timeout, a 200 ms reconnect delay,
    /// then `configure`) and waits until its change feed listens; the caller stops the recorder.
    private func listeningKeystore(
        _ configure: (inout PostgresKeystore.Configuration) -> Void = { _ in }
    ) async throws -> (PostgresKeystore, ChangeRecorder) {
        let keystore = try await keystore {
            $0.operationTimeout = .seconds(1)
            $0.reconnectDelay = .milliseconds(200)
            configure(&$0)
        }
        try await keystore.set([1], forKey: "k")
        let recorder = ChangeRecorder(keystore.changes())
        let listening = await eventually { keystore.isListeningForChanges }
        XCTAssertTrue(listening, "the change feed listens")
        return (keystore, recorder)
    }

    /// Creates a row trigger on the items table that runs `statements` (PL/pgSQL) before each
    /// insert or update, or at commit when `atCommit`.
    private func createItemTrigger(_ name: String, atCommit: Bool = false, _ statements: String) throws {
        let trigger = atCommit
            ? "CREATE CONSTRAINT TRIGGER \(name) AFTER INSERT OR UPDATE ON identity_broker_items DEFERRABLE INITIALLY DEFERRED"
            : "CREATE TRIGGER \(name) BEFORE INSERT OR UPDATE ON identity_broker_items"
        try server.psql("""
            CREATE FUNCTION \(name)() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN \(statements) RETURN NEW; END $$;
            \(trigger) FOR EACH ROW EXECUTE FUNCTION \(name)();
            """, database: database)
    }

    /// Waits past the watch's probe and its check of the pool (100 ms, then pauses up to the
    /// reconnect delay), then checks that the pool was not replaced and still reads `k` = [1].
    private func assertPoolKept(_ keystore: PostgresKeystore, file: StaticString = #filePath, line: UInt = #line) async throws {
        try await Task.sleep(for: .seconds(2))
        XCTAssertEqual(keystore.pool.replacements, 0, file: file, line: line)
        let value = try await keystore.value(forKey: "k")
        XCTAssertEqual(value, [1], file: file, line: line)
    }

    func testNothingAcknowledgedIsLostAcrossARestart() async throws {
        let keystore = try await keystore()
        let acknowledged = Locked<[Int]>([])
        let stop = Locked<Bool>(false)
        let writer = Task {
            var index = 0
            while !stop.withLock({ $0 }) {
                if (try? await keystore.set(Array("value-\(index)".utf8), forKey: "k\(index)")) != nil {
                    acknowledged.withLock { $0.append(index) }
                }
                index += 1
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        try server.restart()
        try await Task.sleep(for: .milliseconds(500))
        let failedBefore = await eventually(timeout: .seconds(20)) { acknowledged.withLock { $0.count } > 0 }
        XCTAssertTrue(failedBefore)
        // Keep writing until some writes land after the restart too.
        let countAtRestart = acknowledged.withLock { $0.count }
        let more = await eventually(timeout: .seconds(20)) { acknowledged.withLock { $0.count } > countAtRestart + 20 }
        XCTAssertTrue(more, "writes succeed again after the restart")
        stop.withLock { $0 = true }
        await writer.value

        let reader = try await self.keystore()
        let keys = Set(try await reader.keys())
        for index in acknowledged.withLock({ $0 }) {
            XCTAssertTrue(keys.contains("k\(index)"), "acknowledged k\(index) survived")
        }
        for index in acknowledged.withLock({ $0 }).prefix(50) {
            let value = try await reader.value(forKey: "k\(index)")
            XCTAssertEqual(value, Array("value-\(index)".utf8))
        }
    }
}
