import BrokerTestSupport
import Foundation
import InMemoryLogging
import Logging
@testable import PostgresKeystore
import PostgresNIO
import SecureStorage
import XCTest

/// One-statement commits without a lock, combined across concurrent callers; the change feed
/// carried by the notifications alone; the schema's migration from version 1.
final class PostgresCommitTests: PostgresTestCase, @unchecked Sendable {
    func testCombinedCommitsFromManyCallersGiveExactResultsAndConvergeByVersion() async throws {
        let keystore = try await keystore()
        var seed = KeystoreBatch()
        for index in 0..<64 {
            seed.set([1], forKey: "newer\(index)", version: 100)
            seed.set([1], forKey: "gone\(index)")
        }
        try await keystore.commit(seed)
        let before = keystore.commitGroups

        let results = try await withThrowingTaskGroup(of: (Int, [Bool]).self) { group in
            for index in (0..<64).shuffled() {
                group.addTask {
                    var batch = KeystoreBatch()
                    batch.set([UInt8(index)], forKey: "own\(index)")
                    batch.set([2], forKey: "newer\(index)", version: 50)
                    batch.remove(forKey: "gone\(index)")
                    batch.remove(forKey: "missing\(index)")
                    // Batches naming one key are not combined: these go one per group.
                    if index % 4 == 3 { batch.set([UInt8(index)], forKey: "shared", version: Int64(index)) }
                    if index % 8 == 0 {
                        // A key named twice: this batch runs alone, in order.
                        batch.set([9], forKey: "own\(index)", version: 1)
                    }
                    return (index, try await keystore.commit(batch))
                }
            }
            return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        for index in 0..<64 {
            let applied = try XCTUnwrap(results[index])
            XCTAssertEqual(Array(applied.prefix(4)), [true, false, true, false], "caller \(index)")
            if index % 8 == 0 {
                XCTAssertEqual(Array(applied.suffix(1)), [true], "an unversioned item takes a versioned set: caller \(index)")
            }
            let own = try await keystore.value(forKey: "own\(index)")
            XCTAssertEqual(own, index % 8 == 0 ? [9] : [UInt8(index)])
        }
        XCTAssertEqual(results[63]?.last, true, "the highest version always applies")
        let shared = try await keystore.value(forKey: "shared")
        XCTAssertEqual(shared, [63], "the highest version wins whatever the order")
        let keys = Set(try await keystore.keys())
        XCTAssertTrue(keys.isDisjoint(with: (0..<64).map { "gone\($0)" }))
        let groups = keystore.commitGroups - before
        XCTAssertLessThan(groups, 64, "concurrent commits were combined (\(groups) groups for 64 batches)")
    }

    /// A batch that names a key twice runs as a transaction, which inserts new keys in the
    /// batch's order: another transaction inserting the same keys in the other order
    /// deadlocks with it, and the server aborts one. The keystore's runs again rather than
    /// failing its caller.
    func testATransactionAbortedByADeadlockRunsAgain() async throws {
        // The keystore's connections look for the cycle (the checking side is the one
        // aborted) once, 10 s into their wait: time enough for the other side to start
        // waiting on a loaded machine; the other side never checks.
        try server.psql("ALTER DATABASE \(database!) SET deadlock_timeout = '10s'")
        let keystore = try await keystore { $0.operationTimeout = .seconds(40) }
        // The observer's connection is made now, not inside the 10 s.
        _ = try await activityCount("wait_event_type = 'Lock'")
        let applied = try await behindAHeldRow("a", holding: { other, logger in
            // The other side never looks for the cycle; it holds a new row of its own.
            try await other.query("SET deadlock_timeout = '1h'", logger: logger)
            try await other.query(
                "INSERT INTO identity_broker_items (service, access_group, key, value) VALUES ('tool', '', 'a', '\\x00')", logger: logger)
        }, meanwhile: { other, logger in
            // Waits for the keystore's new row: a cycle, which the server breaks by aborting
            // the keystore's transaction; its run again then waits for this one to end.
            try await other.query(
                "INSERT INTO identity_broker_items (service, access_group, key, value) VALUES ('tool', '', 'b', '\\x00')", logger: logger)
        }) {
            var batch = KeystoreBatch()
            batch.set([1], forKey: "b")
            batch.set([2], forKey: "a")
            batch.set([3], forKey: "b")
            return try await keystore.commit(batch)
        }
        XCTAssertEqual(applied, [true, true, true])
        let (a, b) = (try await keystore.value(forKey: "a"), try await keystore.value(forKey: "b"))
        XCTAssertEqual(a, [2])
        XCTAssertEqual(b, [3])
    }

    func testAFailingBatchFailsAloneWhenCombined() async throws {
        let keystore = try await keystore()
        try server.psql("""
            CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.key = 'poison' THEN RAISE EXCEPTION 'poisoned'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER refuse_poison BEFORE INSERT OR UPDATE ON identity_broker_items
            FOR EACH ROW EXECUTE FUNCTION refuse_poison();
            """, database: database)
        let outcomes = await withTaskGroup(of: (Int, Result<[Bool], KeystoreError>).self) { group in
            for index in 0..<32 {
                group.addTask {
                    var batch = KeystoreBatch()
                    batch.set([1], forKey: index == 7 ? "poison" : "k\(index)")
                    do throws(KeystoreError) {
                        return (index, .success(try await keystore.commit(batch)))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            return await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        for index in 0..<32 {
            switch outcomes[index] {
            case .success(let applied)?:
                XCTAssertNotEqual(index, 7, "the poisoned batch fails")
                XCTAssertEqual(applied, [true])
            case .failure(let error)?:
                XCTAssertEqual(index, 7, "only the poisoned batch fails: \(error)")
                XCTAssertEqual(error.code, .io)
            case nil:
                XCTFail("no outcome for \(index)")
            }
        }
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 31)
    }

    /// A transaction can fail when it commits, after its statement answered: a deferred
    /// constraint, a serialisation failure, a full `NOTIFY` queue. Such a commit is an error,
    /// never an acknowledgement of rows that were not written.
    func testACommitThatFailsWhenItCommitsIsAnError() async throws {
        let keystore = try await keystore()
        try server.psql("""
            CREATE FUNCTION refuse_doomed() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.key = 'doomed' THEN RAISE EXCEPTION 'refused at commit'; END IF; RETURN NEW; END $$;
            CREATE CONSTRAINT TRIGGER refuse_doomed AFTER INSERT OR UPDATE ON identity_broker_items
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_doomed();
            """, database: database)
        let recorder = ChangeRecorder(keystore.changes())
        let error = await keystoreError { try await keystore.set([1], forKey: "doomed") }
        XCTAssertNotNil(error, "a commit the server refused when committing was acknowledged")
        XCTAssertEqual(error?.code, .io, "\(String(describing: error))")
        let stored = try await keystore.value(forKey: "doomed")
        XCTAssertNil(stored)
        // The keystore keeps working, combined commits included.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<16 { group.addTask { try await keystore.set([1], forKey: "k\(index)") } }
            try await group.waitForAll()
        }
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 16)
        XCTAssertTrue(recorder.contains(.item("k0")))
        XCTAssertFalse(recorder.contains(.item("doomed")), "subscribers were told of a change that was not made")
        recorder.stop()
    }

    /// A caller's logger at trace level: postgres-nio logs every protocol message there, the
    /// password login's SCRAM exchange among them, which allows an offline guess at the
    /// password. The keystore's connections never log it.
    func testATraceLoggerSeesNoPartOfThePasswordLogin() async throws {
        let logs = InMemoryLogHandler()
        var logger = Logger(label: "trace", factory: { _ in logs })
        logger.logLevel = .trace
        let keystore = try await PostgresKeystore(configuration: configuration(), service: "tool", keySource: .raw(key), logger: logger)
        try await keystore.set([1], forKey: "k")
        await keystore.close()
        let text = logs.entries.map { "\($0.message) \($0.metadata)" }.joined(separator: "\n")
        XCTAssertFalse(logs.entries.isEmpty, "the logger got nothing at all")
        for part in ["Sasl", "sasl", "SCRAM", "r=", "p="] {
            XCTAssertFalse(text.contains(part), "\(part) in the log: \(text.prefix(2000))")
        }
    }

    /// A database (or role) set to `synchronous_commit = off` would have the server answer
    /// commits before they are durable: the keystore's connections raise it to `local`, and
    /// leave stronger settings as they are.
    func testConnectionsCommitDurablyWhateverTheDatabaseSays() async throws {
        for (databaseSays, connectionsUse) in [("off", "local"), ("remote_apply", "remote_apply")] {
            try server.psql("ALTER DATABASE \(database!) SET synchronous_commit = \(databaseSays)")
            // A new keystore: its connections are made after the change.
            let keystore = try await keystore()
            // Through the keystore's own path: the connection as its set-up left it.
            let setting = try await keystore.perform("reading the setting") { connection, logger in
                try await connection.query("SELECT pg_catalog.current_setting('synchronous_commit')", logger: logger)
                    .collect().first?.decode(String.self)
            }
            XCTAssertEqual(setting, connectionsUse, "the database says \(databaseSays)")
        }
    }

    /// Whatever leaves a transaction aborted without an error reaching the keystore (a
    /// statement that returns rows fails while it runs, and postgres-nio keeps that error in
    /// the row stream nobody read), its `COMMIT`, answered `ROLLBACK` with no error, is a
    /// failure: nothing was written. (Every such statement of the keystore is collected now;
    /// this guards the next one.)
    func testATransactionTheServerAbortedIsNotReportedAsCommitted() async throws {
        let keystore = try await keystore()
        let pool = keystore.pool
        let error = await keystoreError {
            try await pool.withConnection(on: pool.current) { connection in
                try await PostgresKeystore.transaction(on: connection, logger: keystore.logger) {
                    // A statement that returns rows, its failure left unread in its row stream.
                    _ = try await connection.query("SELECT pg_catalog.pg_notify('x', pg_catalog.repeat('x', 8000))", logger: keystore.logger)
                }
            }
        }
        XCTAssertEqual(error?.code, .io, "\(String(describing: error))")
        XCTAssertTrue(error?.reason.contains("rolled the transaction back") == true, "\(String(describing: error))")
    }

    /// A combined group that fails is retried batch by batch only within its own time: slow
    /// batches do not hold the commit slot for a timeout each, or land long after their
    /// callers were told they failed.
    func testAFailedGroupIsRetriedOnlyWithinTheOperationTimeout() async throws {
        let keystore = try await keystore { $0.operationTimeout = .seconds(1) }
        try server.psql("""
            CREATE FUNCTION slow_or_bad() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.key = 'bad' THEN RAISE EXCEPTION 'bad batch'; END IF;
                IF NEW.key LIKE 'slow%' THEN PERFORM pg_sleep(0.6); END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER slow_or_bad BEFORE INSERT OR UPDATE ON identity_broker_items
            FOR EACH ROW EXECUTE FUNCTION slow_or_bad();
            """, database: database)
        // One batch holds the commit slot while the others queue and form one group.
        async let holding: Void = keystore.set([0], forKey: "slow0")
        try await waitForSleepingStatements()
        await withTaskGroup(of: Void.self) { group in
            for key in ["bad"] + (1...6).map({ "slow\($0)" }) {
                group.addTask { _ = try? await keystore.set([1], forKey: key) }
            }
            await group.waitForAll()
        }
        _ = try? await holding
        // Every caller has its answer; what the group retries after its second runs out is not.
        try await Task.sleep(for: .seconds(4))
        let landed = try server.psqlValue(
            "SELECT count(*) FROM identity_broker_items WHERE key LIKE 'slow%' AND key <> 'slow0'", database: database)
        XCTAssertLessThanOrEqual(Int(landed) ?? 99, 3, "batches were retried long after the group's time ran out")
        // The slot is free again: a new commit goes through within its timeout.
        try await keystore.set([2], forKey: "probe")
    }

    func testConcurrentReadsShareQueriesAndEachGetsItsOwnItem() async throws {
        let keystore = try await keystore()
        var seed = KeystoreBatch()
        for index in 0..<64 { seed.set(Array("value \(index)".utf8), forKey: "r\(index)") }
        seed.set(Array("to be damaged".utf8), forKey: "bad")
        try await keystore.commit(seed)
        try server.psql("""
            UPDATE identity_broker_items SET value = set_byte(value, 20, get_byte(value, 20) # 1) WHERE key = 'bad';
            """, database: database)
        // Every key twice (two readers of one key share a row), missing keys and the damaged one.
        let keys = (0..<64).flatMap { ["r\($0)", "r\($0)"] } + (0..<16).map { "missing\($0)" } + ["bad", "bad"]
        let before = keystore.readGroups
        let results = await readAtOnce(keys, from: keystore)
        for (index, key) in keys.enumerated() {
            switch results[index] {
            case .success(let value)?:
                if key.hasPrefix("r") {
                    XCTAssertEqual(value, Array("value \(key.dropFirst())".utf8), "reader \(index) of \(key)")
                } else {
                    XCTAssertEqual(key.hasPrefix("missing"), true, "\(key) read without error")
                    XCTAssertNil(value, "\(key) does not exist")
                }
            case .failure(let error)?:
                XCTAssertEqual(key, "bad", "only the damaged item fails: \(error)")
                XCTAssertEqual(error.code, .authenticationFailed)
                XCTAssertTrue(error.reason.contains("'bad'"), "the error names the key: \(error)")
            case nil:
                XCTFail("no result for reader \(index)")
            }
        }
        let groups = keystore.readGroups - before
        XCTAssertLessThan(groups, keys.count, "concurrent reads were combined (\(groups) queries for \(keys.count) reads)")
    }

    /// A commit is one `CALL` that commits before it answers: a connection lost under it,
    /// whether in its statement or at its `COMMIT`, may have committed, so it is reported as
    /// such and not sent again. A connection found closed before anything was sent is
    /// replaced, and the commit runs on another.
    func testAConnectionLostUnderACommitIsOutcomeUnknownAndOneFoundClosedIsReplaced() async throws {
        let keystore = try await keystore()
        try await keystore.set([1], forKey: "before")
        // The server process ends itself in a deferred trigger (which runs at COMMIT), or in a
        // row trigger (in the statement); sequences count the attempts (a rollback does not
        // undo them).
        try server.psql("""
            CREATE SEQUENCE commit_attempts;
            CREATE SEQUENCE statement_attempts;
            GRANT USAGE ON SEQUENCE commit_attempts, statement_attempts TO \(server.passwordRole);
            CREATE FUNCTION lose_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.key = 'lost at commit' THEN
                    PERFORM nextval('commit_attempts');
                    PERFORM pg_terminate_backend(pg_backend_pid());
                    PERFORM pg_sleep(1);
                END IF;
                RETURN NEW;
            END $$;
            CREATE CONSTRAINT TRIGGER lose_at_commit AFTER INSERT OR UPDATE ON identity_broker_items
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lose_at_commit();
            CREATE FUNCTION lose_in_statement() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.key = 'lost in statement' THEN
                    PERFORM nextval('statement_attempts');
                    PERFORM pg_terminate_backend(pg_backend_pid());
                    PERFORM pg_sleep(1);
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER lose_in_statement BEFORE INSERT OR UPDATE ON identity_broker_items
            FOR EACH ROW EXECUTE FUNCTION lose_in_statement();
            """, database: database)
        for (key, sequence) in [("lost at commit", "commit_attempts"), ("lost in statement", "statement_attempts")] {
            let error = await keystoreError { try await keystore.set([2], forKey: key) }
            XCTAssertEqual(error?.code, .storeUnavailable, "\(key): \(String(describing: error))")
            XCTAssertTrue(error?.reason.contains("outcome is unknown") ?? false, "\(key): \(String(describing: error))")
            let attempts = try server.psqlValue("SELECT last_value FROM \(sequence)", database: database)
            XCTAssertEqual(attempts, "1", "\(key): a commit that may have committed is not sent again")
        }

        // Every idle connection of the keystore's pool ends; the next commit finds its
        // connection closed (or the pool has replaced it) and goes on without an error.
        try server.psql("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE usename = '\(server.passwordRole)' AND datname = current_database() AND pid <> pg_backend_pid()
            """, database: database)
        try await Task.sleep(for: .milliseconds(200))
        try await keystore.set([3], forKey: "after")
        let after = try await keystore.value(forKey: "after")
        XCTAssertEqual(after, [3], "the keystore goes on with another connection")
        let before = try await keystore.value(forKey: "before")
        XCTAssertEqual(before, [1])
    }

    /// A remove held up on the server past the operation timeout: its caller is told it
    /// failed, and it must not apply later, after a write of the same key that was
    /// acknowledged meanwhile (the server cancels it at `statement_timeout`).
    func testARemoveThatTimedOutDoesNotApplyAfterALaterWrite() async throws {
        let keystore = try await keystore { $0.operationTimeout = .seconds(1) }
        try await keystore.set([1], forKey: "k")
        // Statement-level, so it runs before any row lock: only the flag row decides.
        try server.psql("""
            CREATE TABLE slow_removes (on_ boolean);
            INSERT INTO slow_removes VALUES (true);
            GRANT SELECT, UPDATE ON slow_removes TO \(server.passwordRole);
            CREATE FUNCTION slow_remove() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF (SELECT on_ FROM slow_removes) THEN PERFORM pg_sleep(2.5); END IF;
                RETURN NULL;
            END $$;
            CREATE TRIGGER slow_remove BEFORE DELETE ON identity_broker_items
            FOR EACH STATEMENT EXECUTE FUNCTION slow_remove();
            """, database: database)
        let error = await keystoreError { try await keystore.remove(forKey: "k") }
        XCTAssertEqual(error?.code, .storeUnavailable, "\(String(describing: error))")
        try server.psql("UPDATE slow_removes SET on_ = false", database: database)
        try await keystore.set([2], forKey: "k")  // acknowledged
        try await Task.sleep(for: .seconds(3))  // past the held remove's sleep
        let value = try await keystore.value(forKey: "k")
        XCTAssertEqual(value, [2], "the remove that timed out never applied")
    }

    /// A commit that answers after its caller's deadline: the caller is told the commit did
    /// not complete in time (not that it failed to apply), and the change, which did apply,
    /// still reaches this instance's subscribers and the other instances'. The commit waits
    /// behind another group for most of its caller's time, then runs within the server's
    /// statement timeout (which counts from the statement's start).
    func testACommitThatAnswersAfterItsDeadlineStillReachesEverySubscriber() async throws {
        let keystore = try await keystore { $0.operationTimeout = .seconds(3) }
        let other = try await self.keystore()
        let local = ChangeRecorder(keystore.changes())
        let remote = ChangeRecorder(other.changes())
        let listening = await everyKeystoreListens()
        XCTAssertTrue(listening, "both feeds listen")
        try server.psql("""
            CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.key = 'held' THEN PERFORM pg_sleep(2); END IF;
                IF NEW.key = 'late' THEN PERFORM pg_sleep(2.5); END IF;
                RETURN NEW;
            END $$;
            CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT OR UPDATE ON identity_broker_items
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();
            """, database: database)

        // One group commits at a time: "late" waits ~2 s for "held" (inside its 3 s), then
        // takes 2.5 s (inside the statement timeout, 3 s), and answers ~1.5 s after its deadline.
        let held = Task { try await keystore.set([6], forKey: "held") }
        try await waitForSleepingStatements()
        let started = ContinuousClock.now
        let error = await keystoreError { try await keystore.set([7], forKey: "late") }
        XCTAssertEqual(error?.code, .storeUnavailable, "\(String(describing: error))")
        XCTAssertTrue(error?.reason.contains("did not complete within") ?? false, "\(String(describing: error))")
        // At its deadline (3 s), not when the commit ended (~4.5 s).
        XCTAssertLessThan(ContinuousClock.now - started, .milliseconds(3_900), "the caller was answered at its deadline")
        try await held.value

        let reachedLocal = await eventually { local.contains(.item("late")) }
        XCTAssertTrue(reachedLocal, "this instance's subscribers learn of the late commit")
        let reachedRemote = await eventually { remote.contains(.item("late")) }
        XCTAssertTrue(reachedRemote, "other instances learn of it")
        let stored = try await other.value(forKey: "late")
        XCTAssertEqual(stored, [7], "the commit applied")
        // The keystore goes on: its connection was not closed under the late answer.
        try await keystore.set([8], forKey: "next")
        let next = try await other.value(forKey: "next")
        XCTAssertEqual(next, [8])
        local.stop()
        remote.stop()
    }

    func testConcurrentCommitsFromTwoKeystoresOnOneKeyConvergeToTheLaterVersion() async throws {
        let first = try await keystore()
        let second = try await keystore()
        for round in 0..<3 {
            let key = "session\(round)"
            try await withThrowingTaskGroup(of: Void.self) { group in
                for version in (1...40).shuffled() {
                    let writer = version % 2 == 0 ? first : second
                    group.addTask {
                        var batch = KeystoreBatch()
                        batch.set([UInt8(version)], forKey: key, version: Int64(version))
                        batch.set([1], forKey: "\(key).writer\(version)")
                        let applied = try await writer.commit(batch)
                        XCTAssertEqual(applied[1], true)
                        if version == 40 { XCTAssertEqual(applied[0], true, "the latest version applies") }
                    }
                }
                try await group.waitForAll()
            }
            let fromFirst = try await first.value(forKey: key)
            let fromSecond = try await second.value(forKey: key)
            XCTAssertEqual(fromFirst, [40], "round \(round)")
            XCTAssertEqual(fromSecond, [40], "round \(round)")
        }
    }

    /// A commit removing several keys locks their rows in byte order, as a migration (and
    /// every upsert) does, whatever the database's collation: under ICU's `en`, `session.a`
    /// sorts before `session.B`, and the delete's own index scan went that way, so a
    /// migration holding `session.B` and this commit holding `session.a` each waited for the
    /// other (the server then aborts one: a failed migration). Here another transaction holds
    /// `session.B`: the commit must wait for it before it locks `session.a`.
    func testACommitRemovingSeveralKeysLocksTheirRowsInByteOrderWhateverTheCollation() async throws {
        database = try server.createDatabase(icuLocale: "en")
        XCTAssertEqual(try server.psqlValue("SELECT 'session.a' < 'session.B'", database: database), "t", "not a collation that differs from bytes")
        let writer = try await keystore()
        try await writer.set([1], forKey: "session.a")
        try await writer.set([2], forKey: "session.B")
        var batch = KeystoreBatch()
        batch.remove(forKey: "session.a")
        batch.remove(forKey: "session.B")
        let removed = try await commit(batch, of: writer, behindAHeld: "session.B") { holder, logger in
            // Free while the commit waits for session.B: it has not locked session.a yet.
            do {
                _ = try await holder.query("SELECT key FROM identity_broker_items WHERE key = 'session.a' FOR UPDATE NOWAIT", logger: logger).collect()
            } catch {
                XCTFail("the commit locked session.a before session.B: \(String(reflecting: error))")
            }
        }
        XCTAssertEqual(removed, [true, true])
        let left = try await writer.keys()
        XCTAssertEqual(left, [])
    }

    /// A commit that only sets keys locks their rows in the server encoding's byte order, as a
    /// migration does: on an EUC_JP database `Ａ` (A3 C1) comes before `漢` (B4 C1), while
    /// their UTF-8 bytes (EF BC A1, E6 BC A2) put `漢` first, and the upserts went in the
    /// client's UTF-8 order, so a migration holding one and this commit the other could
    /// deadlock. Here another transaction holds `session.漢`: the commit must have locked
    /// `session.Ａ` before it waits.
    func testACommitSettingSeveralKeysLocksTheirRowsInTheServerEncodingsByteOrder() async throws {
        let name = "broker_eucjp_\(UUID().uuidString.prefix(8).lowercased())"
        try server.psql("CREATE DATABASE \(name) OWNER \(server.passwordRole) ENCODING 'EUC_JP' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
        database = name
        let (first, second) = ("session.漢", "session.Ａ")
        XCTAssertTrue(first.utf8.lexicographicallyPrecedes(second.utf8), "the client's order")
        let writer = try await keystore()
        try await writer.set([1], forKey: first)
        try await writer.set([2], forKey: second)
        var batch = KeystoreBatch()
        batch.set([3], forKey: first)
        batch.set([4], forKey: second)
        let applied = try await commit(batch, of: writer, behindAHeld: first) { holder, logger in
            let serverOrder = try await holder.query("SELECT \(second)::text COLLATE \"C\" < \(first)::text COLLATE \"C\"", logger: logger)
                .collect().first?.decode(Bool.self)
            XCTAssertEqual(serverOrder, true, "EUC_JP's bytes put \(second) first")
            do {
                _ = try await holder.query("SELECT key FROM identity_broker_items WHERE key = \(second) FOR UPDATE NOWAIT", logger: logger).collect()
                XCTFail("\(second) was free while the commit waited for \(first): the upserts went in UTF-8 order")
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" {
                // Locked by the commit, as it should be.
            }
        }
        XCTAssertEqual(applied, [true, true])
        let values = try await [writer.value(forKey: first), writer.value(forKey: second)]
        XCTAssertEqual(values, [[3], [4]])
    }

    /// A database whose transactions default to `repeatable read` or `serializable` made a
    /// commit that waited for a row another transaction then changed fail with a
    /// serialization failure (40001) where `read committed` applies it to the row as
    /// committed: a federation failed whenever another instance wrote the same session. The
    /// keystore's connections run `read committed` whatever the database says.
    func testACommitBehindAConcurrentChangeAppliesWhateverIsolationTheDatabaseDefaultsTo() async throws {
        for isolation in ["repeatable read", "serializable"] {
            database = try server.createDatabase()
            try server.psql("ALTER DATABASE \(database!) SET default_transaction_isolation = '\(isolation)'")
            let writer = try await keystore()
            try await writer.set([1], forKey: "session.a")
            var batch = KeystoreBatch()
            batch.set([2], forKey: "session.a")
            batch.set([3], forKey: "session.b")
            let applied = try await commit(batch, of: writer, behindAHeld: "session.a", changingIt: true)
            XCTAssertEqual(applied, [true, true], isolation)
            let a = try await writer.value(forKey: "session.a")
            let b = try await writer.value(forKey: "session.b")
            XCTAssertEqual(a, [2], isolation)
            XCTAssertEqual(b, [3], isolation)
        }
    }

    /// The set-up statement leaves out a setting the server does not know (older servers lack
    /// `plan_cache_mode`, `idle_session_timeout` or `transaction_timeout`) instead of failing,
    /// and sets the ones it knows.
    func testTheSetUpSkipsSettingsTheServerDoesNotKnow() async throws {
        let keystore = try await keystore()
        let pool = keystore.pool
        let sql = ConnectionSetup.statement(
            statementTimeoutMilliseconds: 4321,
            defaults: ConnectionSetup.sessionDefaults + [("no_such_setting_anywhere", "'1'")])
        let timeout = try await pool.withConnection(on: pool.current) { connection in
            _ = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: keystore.logger).collect()
            return try await connection.query("SELECT pg_catalog.current_setting('statement_timeout')", logger: keystore.logger)
                .collect().first?.decode(String.self)
        }
        XCTAssertEqual(timeout, "4321ms")
    }

    /// A database (or role) with a short `lock_timeout` failed a commit that waited for another
    /// transaction's write of the same session (55P03, not retried) where the two should
    /// converge: the keystore's connections wait for a lock as long as the statement timeout
    /// allows.
    func testACommitWaitsForALockLongerThanTheDatabasesLockTimeout() async throws {
        try server.psql("ALTER DATABASE \(database!) SET lock_timeout = '50ms'")
        let writer = try await keystore()
        try await writer.set([1], forKey: "session.a")
        var batch = KeystoreBatch()
        batch.set([2], forKey: "session.a")
        let applied = try await commit(batch, of: writer, behindAHeld: "session.a") { _, _ in
            try await Task.sleep(for: .milliseconds(300))
        }
        XCTAssertEqual(applied, [true])
        let value = try await writer.value(forKey: "session.a")
        XCTAssertEqual(value, [2])
    }

    /// A database (or role) set to `default_transaction_read_only`: writes fail as the store
    /// being unavailable, saying why, and reads go on. A connection keeps the setting it
    /// started with, so each that fails so is closed: once the setting is reset, writes work
    /// again without a restart (before, the pool's connections failed every write for good).
    func testWritesToAReadOnlyDatabaseFailNamingTheCauseAndWorkOnceItIsWritable() async throws {
        let writer = try await keystore()
        try await writer.set([1], forKey: "session.a")
        try server.psql("ALTER DATABASE \(database!) SET default_transaction_read_only = on")
        let reader = try await keystore()
        let recorder = await listeningRecorder(reader, reader.changes())
        defer { recorder.stop() }
        let error = await keystoreError { try await reader.set([2], forKey: "session.a") }
        XCTAssertEqual(error?.code, .storeUnavailable, "\(String(describing: error))")
        XCTAssertTrue(error?.reason.contains("25006") == true, "\(String(describing: error))")
        XCTAssertTrue(error?.reason.contains("the URL must reach the primary") == true, "\(String(describing: error))")
        let value = try await reader.value(forKey: "session.a")
        XCTAssertEqual(value, [1])
        // A refusal applied nothing: no uncertain window, whose start tells subscribers the
        // key may have changed (and makes clients re-read it).
        try await Task.sleep(for: .milliseconds(300))
        XCTAssertFalse(recorder.contains(.item("session.a")), "a refused write was taken as one that may have applied: \(recorder.changes)")

        try server.psql("ALTER DATABASE \(database!) RESET default_transaction_read_only")
        // Each connection that started read-only fails one write and is closed; there are at
        // most the pool's size of them.
        var failures = 0
        while true {
            do {
                try await reader.set([3], forKey: "session.a")
                break
            } catch {
                failures += 1
                XCTAssertEqual(error.code, .storeUnavailable, "\(error)")
                if failures > reader.configuration.poolSize { return XCTFail("writes still fail: \(error)") }
            }
        }
        let written = try await writer.value(forKey: "session.a")
        XCTAssertEqual(written, [3])
    }

    /// A URL that leads to a standby (the old primary a failover demoted, or a replica):
    /// the open fails as the store being unavailable and says the URL must reach the
    /// primary; the standby's lagging reads are never served.
    func testAStandbyIsRefusedNamingTheCause() async throws {
        let writer = try await keystore()
        try await writer.set([1], forKey: "session.a")
        let standby = try server.startStandby()
        defer { standby.stop() }
        var configuration = try configuration()
        configuration.port = standby.port
        let error = await keystoreError {
            _ = try await PostgresKeystore(configuration: configuration, service: "tool", keySource: .raw(self.key))
        }
        XCTAssertEqual(error?.code, .storeUnavailable, "\(String(describing: error))")
        XCTAssertTrue(error?.reason.contains("standby") == true, "\(String(describing: error))")
    }

    /// A keystore whose address comes to lead to a standby (a failover that demoted its
    /// server while DNS still names it) fails its calls naming the cause, and does not log in
    /// to the standby once per call: a refusal stands for the reconnect delay (2 s here, cut
    /// to the 1 s longest hold-off). Each call used to take a new connection, set it up and be
    /// refused, as fast as calls came.
    func testCallsAfterAFailoverToAStandbyDoNotEachLogInAgain() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        defer { proxy.stop() }
        let keystore = try await keystore {
            $0.port = Int(proxy.port)
            $0.reconnectDelay = .seconds(2)
        }
        try await keystore.set([1], forKey: "session.a")
        let standby = try server.startStandby()
        defer { standby.stop() }
        func sessions() throws -> Int {
            Int(try standby.psqlValue("SELECT pg_catalog.sum(sessions) FROM pg_catalog.pg_stat_database")) ?? -1
        }
        let before = try sessions()
        proxy.retarget(to: UInt16(standby.port))
        var refusals = 0
        for _ in 0..<30 {
            let error = await keystoreError { _ = try await keystore.value(forKey: "session.a") }
            if error?.code == .storeUnavailable && error?.reason.contains("standby") == true { refusals += 1 }
        }
        XCTAssertGreaterThanOrEqual(refusals, 25, "calls name the standby")
        try await Task.sleep(for: .milliseconds(1500))  // statistics reach the shared counters within a second
        let logins = try sessions() - before
        // The pool's own two connections, the first refused call's, and a little slack; one per call before.
        XCTAssertLessThanOrEqual(logins, 8, "logins to the standby during 30 calls")
    }

    /// A commit that sets some keys and removes others locks all their rows in one byte order
    /// first: its upserts and its removes each went in order, but one after the other, so a
    /// commit setting `session.a` and removing `session.B` took `a` before `B`, against a
    /// migration's (and every other statement's) `B` before `a`. Here another transaction
    /// holds `session.a`: the commit must have locked `session.B` before it waits.
    func testACommitThatSetsAndRemovesLocksAllItsRowsInOneByteOrder() async throws {
        let writer = try await keystore()
        try await writer.set([1], forKey: "session.a")
        try await writer.set([2], forKey: "session.B")
        var batch = KeystoreBatch()
        batch.set([3], forKey: "session.a")
        batch.remove(forKey: "session.B")
        let applied = try await commit(batch, of: writer, behindAHeld: "session.a") { holder, logger in
            do {
                _ = try await holder.query("SELECT key FROM identity_broker_items WHERE key = 'session.B' FOR UPDATE NOWAIT", logger: logger).collect()
                XCTFail("session.B was free while the commit waited for session.a: it locks a before B")
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" {
                // Locked by the commit, as it should be.
            }
        }
        XCTAssertEqual(applied, [true, true])
        let a = try await writer.value(forKey: "session.a")
        XCTAssertEqual(a, [3])
        let b = try await writer.value(forKey: "session.B")
        XCTAssertNil(b)
    }

    /// Commits `batch` while another transaction holds `key`'s row (``behindAHeldRow``).
    private func commit(
        _ batch: KeystoreBatch, of writer: PostgresKeystore, behindAHeld key: String, changingIt: Bool = false,
        _ check: (PostgresConnection, Logger) async throws -> Void = { _, _ in }
    ) async throws -> [Bool] {
        try await behindAHeldRow(key, changingIt: changingIt, meanwhile: check) { try await writer.commit(batch) }
    }

    /// A commit whose keys overflow one notification is announced in several, each under the
    /// payload limit in bytes (two-byte characters here), never as `.all`.
    func testAPayloadTooLargeForOneNotificationIsSplit() async throws {
        let writer = try await keystore()
        let watcher = try await keystore()
        let recorder = await listeningRecorder(watcher, watcher.changes())
        defer { recorder.stop() }
        let allBefore = recorder.changes.filter { $0 == .all }.count

        // Small enough: the keys themselves, escaped by length (colons and bars in keys).
        try await writer.set([1], forKey: "a:b|c*")
        let small = await eventually(timeout: .seconds(10)) { recorder.contains(.item("a:b|c*")) }
        XCTAssertTrue(small, "\(recorder.changes)")

        var large = KeystoreBatch()
        for index in 0..<60 { large.set([1], forKey: "k\(index)-" + String(repeating: "é", count: 80)) }
        try await writer.commit(large)
        let keys = (0..<60).map { KeystoreChange.item("k\($0)-" + String(repeating: "é", count: 80)) }
        let named = await eventually(timeout: .seconds(10)) { Set(recorder.changes).isSuperset(of: keys) }
        XCTAssertTrue(named, "a commit too large for one notification names its keys in several: \(recorder.changes.suffix(5))")
        XCTAssertEqual(recorder.changes.filter { $0 == .all }.count, allBefore, "and reports no .all")

        try await writer.set([2], forKey: "after")
        let after = await eventually(timeout: .seconds(10)) { recorder.contains(.item("after")) }
        XCTAssertTrue(after, "the feed goes on")
    }

    func testNotificationsRoundTripAndIgnoreOtherNamespaces() throws {
        let namespace = PostgresNamespace(service: "tool", group: AccessGroup(name: "tëam:1"), keys: KeyRing(sealing: SecretBytes(copying: [UInt8](repeating: 7, count: 32))))
        let other = PostgresNamespace(service: "tool", group: AccessGroup(name: "tëam:12"), keys: namespace.keys)
        let payload = namespace.notification(origin: -42, keys: ["a", "é:x|y", "ünï"])
        let parsed = try XCTUnwrap(namespace.parseNotification(payload))
        XCTAssertEqual(parsed.origin, -42)
        XCTAssertEqual(parsed.keys, ["a", "é:x|y", "ünï"])
        XCTAssertNil(other.parseNotification(payload), "another group's notification is skipped")
        let tooLarge = namespace.notification(origin: 1, keys: (0..<100).map { "key\($0)" + String(repeating: "x", count: 100) })
        XCTAssertLessThan(tooLarge.utf8.count, 100)
        XCTAssertNil(try XCTUnwrap(namespace.parseNotification(tooLarge)).keys, "every key")
        XCTAssertNil(try XCTUnwrap(namespace.parseNotification(namespace.notificationPrefix + "garbage")).keys, "unparsable means every key")
    }

    /// Keys of any script are reported key by key on a `SQL_ASCII` database too, where
    /// `length()` counts bytes (initdb's default in the C locale): notifications' key lengths
    /// are read in the unit the server wrote them in.
    func testNonASCIIKeysAreReportedOnASQLASCIIDatabase() async throws {
        let name = "broker_ascii_\(UUID().uuidString.prefix(8).lowercased())"
        try server.psql("CREATE DATABASE \(name) OWNER \(server.passwordRole) ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
        database = name
        let writer = try await keystore()
        let listener = try await keystore()
        let recorder = await listeningRecorder(listener, listener.changes())
        defer { recorder.stop() }
        let keys = ["clé", "straße-😀", "ascii", "ünï:|x"]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for key in keys { group.addTask { try await writer.set([1], forKey: key) } }
            try await group.waitForAll()
        }
        let reported = await eventually(timeout: .seconds(3)) { keys.allSatisfy { recorder.contains(.item($0)) } }
        XCTAssertTrue(reported, "\(recorder.changes)")
        let stored = try await listener.value(forKey: "straße-😀")
        XCTAssertEqual(stored, [1])
    }

    func testNotificationsParseInEitherLengthUnit() throws {
        let key = SecretBytes(copying: [UInt8](repeating: 7, count: 32))
        for inBytes in [false, true] {
            let namespace = PostgresNamespace(service: "tööl", group: .none, keys: KeyRing(sealing: key), keyLengthsInBytes: inBytes)
            let keys = ["a", "é:x|y", "😀😀", String(repeating: "ß", count: 90)]
            let parsed = try XCTUnwrap(namespace.parseNotification(namespace.notification(origin: 7, keys: keys)))
            XCTAssertEqual(parsed.keys, keys, "lengths in bytes: \(inBytes)")
            // The other unit misreads them: never a crash, and never the right keys.
            let misread = PostgresNamespace(service: "tööl", group: .none, keys: KeyRing(sealing: key), keyLengthsInBytes: !inBytes)
            XCTAssertNotEqual(misread.parseNotification(namespace.notification(origin: 7, keys: keys))?.keys, keys)
        }
        let namespace = PostgresNamespace(service: "tool", group: .none, keys: KeyRing(sealing: key))
        for forged in ["", "0123456789abcdef|", "0123456789abcdef|9:ab", "0123456789abcdef|1:", "0123456789abcdef|a:b",
                       "0123456789abcdef|123456789:x", "0123456789abcde", "0123456789abcdef"] {
            let parsed = namespace.parseNotification(namespace.notificationPrefix + forged)
            XCTAssertNotNil(parsed, forged)
            XCTAssertNil(parsed?.keys, "\(forged) parses as every key")
        }
    }

    func testAVersion1DatabaseIsMigrated() async throws {
        let old = try await keystore()
        try await old.set(Array("kept".utf8), forKey: "session.alice", version: 3)
        await old.close()
        // What version 1 left: its change log, with rows, and version 1.
        try server.psql("""
            SET ROLE \(server.passwordRole);
            CREATE TABLE identity_broker_changes (
                seq bigserial PRIMARY KEY, service text NOT NULL, access_group text NOT NULL, key text NOT NULL,
                origin bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now());
            CREATE INDEX identity_broker_changes_namespace ON identity_broker_changes (service, access_group, seq);
            INSERT INTO identity_broker_changes (service, access_group, key, origin) VALUES ('tool', '', 'session.alice', 1);
            UPDATE identity_broker_schema SET version = 1;
            """, database: database)

        let first = try await keystore()
        let second = try await keystore()
        let version = try server.psqlValue("SELECT version FROM identity_broker_schema", database: database)
        XCTAssertEqual(version, String(PostgresSchema.version))
        let table = try server.psqlValue("SELECT count(*) FROM pg_tables WHERE tablename = 'identity_broker_changes'", database: database)
        XCTAssertEqual(table, "0", "the change log is gone")
        let kept = try await second.value(forKey: "session.alice")
        XCTAssertEqual(kept, Array("kept".utf8))
        let stale = try await first.set([1], forKey: "session.alice", version: 2)
        XCTAssertFalse(stale, "versions survive the migration")

        let recorder = ChangeRecorder(second.changes())
        defer { recorder.stop() }
        let listening = await eventually { second.isListeningForChanges }
        XCTAssertTrue(listening)
        try await first.set([2], forKey: "session.bob")
        let seen = await eventually(timeout: .seconds(10)) { recorder.contains(.item("session.bob")) }
        XCTAssertTrue(seen, "the feed works on the migrated database")
    }
}
