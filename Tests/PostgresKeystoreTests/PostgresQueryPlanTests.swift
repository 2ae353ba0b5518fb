import BrokerTestSupport
import Foundation
@testable import PostgresKeystore
import PostgresNIO
import SecureStorage
import XCTest

/// Statements over several keys touch only those keys' rows, whatever the server's
/// statistics know of the namespace, and keystore connections plan prepared statements once.
///
/// The case that went wrong: a namespace created (or grown) after the table's last
/// `ANALYZE` is unknown to the planner, which then estimates its `(service, access_group)`
/// prefix at one row. With `key = ANY($3)` a combined read planned for its arguments scanned
/// the whole prefix and filtered the keys: 3.5 ms for 3 keys in a 6,200-item namespace, two
/// thirds of the server's CPU in the c = 64 benchmark.
final class PostgresQueryPlanTests: PostgresTestCase, @unchecked Sendable {
    /// Rows in the namespace the planner has not seen; each holds a session-sized value, so
    /// a scan of the namespace reads hundreds of pages.
    private let unseenRows = 3_000
    /// The most pages a look-up of 3 keys may touch: a few index levels and a heap page each.
    private let pagesForThreeKeys = 40

    func testACombinedReadLooksUpEachKeyInANamespaceTheStatisticsHaveNotSeen() async throws {
        try await createUnseenNamespace()
        // Planned for its arguments (a server's default) and on the generic plan (the keystore's).
        for mode in ["auto", "force_generic_plan"] {
            let pages = try pagesTouched(
                prepare: "SET plan_cache_mode = \(mode);\nPREPARE read_many(text, text, text[]) AS \(PostgresSchema.ReadMany.sql)",
                execute: "EXECUTE read_many('tool', '', ARRAY['k17', 'k2500', 'missing'])")
            XCTAssertLessThanOrEqual(pages, pagesForThreeKeys, "\(mode): a combined read of 3 keys touched \(pages) pages of the items table")
        }
    }

    func testCombinedRemovesFindTheirKeysInANamespaceTheStatisticsHaveNotSeen() async throws {
        try await createUnseenNamespace()
        // On the generic plan, as every keystore connection runs it (`ConnectionSetup`).
        let pages = try pagesTouched(
            prepare: """
                SET plan_cache_mode = force_generic_plan;
                PREPARE apply_distinct(text, text, text[], int8[], bool[], bytea[], text[], text) AS \(PostgresSchema.ApplyDistinct.sql)
                """,
            execute: """
                EXECUTE apply_distinct('tool', '', '{}', '{}', '{}', '{}', ARRAY['k17', 'k2500', 'missing'], 'header:')
                """,
            inRolledBackTransaction: true)
        XCTAssertLessThanOrEqual(pages, pagesForThreeKeys, "removing 3 keys touched \(pages) pages of the items table")
        // Rolled back: the rows are still there.
        let remaining = try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE service = 'tool'", database: database)
        XCTAssertEqual(remaining, "\(unseenRows)")
    }

    /// A fresh database: the table was never analysed, so the generic plan has no statistics
    /// at all. With a single `key = ANY($7)` delete, every commit there, removing nothing or
    /// one key, scanned its whole namespace (1,038 pages here): 0.6 ms per commit at 3,000
    /// items, growing with the namespace. Checked with the plan made when the table was empty
    /// (as a connection's first commit makes it on a new database) and made at 3,000 items.
    /// (Removes of several keys in one statement still may scan, until the table is
    /// analysed: see `PostgresSchema.ApplyDistinct`.)
    func testCommitsTouchOnlyTheirKeysInATableNeverAnalysed() async throws {
        // The schema, with autovacuum off so that nothing analyses the table meanwhile.
        _ = try await keystore(service: "schema")
        _ = try server.psql("ALTER TABLE identity_broker_items SET (autovacuum_enabled = false)", database: database)
        let prepare = """
            SET plan_cache_mode = force_generic_plan;
            PREPARE apply_distinct(text, text, text[], int8[], bool[], bytea[], text[], text) AS \(PostgresSchema.ApplyDistinct.sql)
            """
        let value = "decode(repeat('ef', 1300), 'hex')"
        let setNew = "EXECUTE apply_distinct('tool', '', ARRAY['new'], ARRAY[1]::int8[], ARRAY[true], ARRAY[\(value)], '{}', 'header:')"
        let fill = """
            INSERT INTO identity_broker_items (service, access_group, key, version, value)
            SELECT 'tool', '', 'k' || i, NULL, decode(repeat('cd', 1300), 'hex') FROM generate_series(1, \(unseenRows)) AS i
            """

        // Planned on the empty table (the first commit, rolled back), then filled, in one session.
        let plannedEmpty = try pagesTouched(
            prepare: "\(prepare);\nBEGIN;\n\(setNew);\nROLLBACK;\nBEGIN;\n\(fill);\nCOMMIT", execute: setNew, inRolledBackTransaction: true)
        XCTAssertLessThanOrEqual(plannedEmpty, pagesForThreeKeys, "a set planned on the empty table touched \(plannedEmpty) pages")

        let commits = [
            "a set of one new key": setNew,
            "a set of an existing key": "EXECUTE apply_distinct('tool', '', ARRAY['k2500'], ARRAY[1]::int8[], ARRAY[true], ARRAY[\(value)], '{}', 'header:')",
            "a remove of 1 key": "EXECUTE apply_distinct('tool', '', '{}', '{}', '{}', '{}', ARRAY['k1234'], 'header:')",
        ]
        for (name, execute) in commits {
            let pages = try pagesTouched(prepare: prepare, execute: execute, inRolledBackTransaction: true)
            XCTAssertLessThanOrEqual(pages, pagesForThreeKeys, "\(name) touched \(pages) pages of the items table")
        }
        let remaining = try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE service = 'tool'", database: database)
        XCTAssertEqual(remaining, "\(unseenRows)")
        let neverAnalysed = try server.psqlValue(
            "SELECT coalesce(last_analyze, last_autoanalyze) IS NULL FROM pg_stat_user_tables WHERE relname = 'identity_broker_items'",
            database: database)
        XCTAssertEqual(neverAnalysed, "t", "never analysed")
    }

    func testTheRemovesOfACombinedCommitRemoveExactlyTheirKeys() async throws {
        let keystore = try await keystore()
        var seed = KeystoreBatch()
        for index in 0..<50 { seed.set([UInt8(index)], forKey: "k\(index)") }
        try await keystore.commit(seed)

        var batch = KeystoreBatch()
        batch.remove(forKey: "k3")
        batch.remove(forKey: "k40")
        batch.remove(forKey: "missing")
        batch.set([9], forKey: "new")
        try await keystore.commit(batch)

        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 49)
        XCTAssertFalse(keys.contains("k3"))
        XCTAssertFalse(keys.contains("k40"))
        XCTAssertTrue(keys.contains("new"))
        XCTAssertTrue(keys.contains("k4"))
    }

    func testPooledConnectionsRunPreparedStatementsOnTheirGenericPlan() async throws {
        let keystore = try await keystore()
        let runs = 8
        // Under the server's default the first five runs of a prepared statement are planned
        // for their arguments; on a connection the keystore set up, none is.
        let plans = try await keystore.perform("reading on one connection") { connection, logger in
            let read = PostgresSchema.ReadOne(service: "tool", group: "", key: "missing")
            for _ in 0..<runs { _ = try await PostgresSchema.run(read, on: connection, logger: logger) }
            let row = try await connection.query(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = \(PostgresSchema.ReadOne.name)",
                logger: logger
            ).collect().first
            return try row?.decode((Int64, Int64).self)
        }
        XCTAssertEqual(plans?.0, Int64(runs), "generic plans")
        XCTAssertEqual(plans?.1, 0, "plans made for their arguments")
    }

    /// Analyses the table while it holds another service's rows only, then adds
    /// ``unseenRows`` rows for service `tool`, which the statistics therefore do not know.
    private func createUnseenNamespace() async throws {
        // The schema, created as the first instance of a fleet creates it.
        _ = try await keystore(service: "schema")
        _ = try server.psql("""
            ALTER TABLE identity_broker_items SET (autovacuum_enabled = false);
            INSERT INTO identity_broker_items (service, access_group, key, version, value)
            SELECT 'other', '', 'k' || i, NULL, decode(repeat('ab', 1300), 'hex') FROM generate_series(1, 300) AS i;
            ANALYZE identity_broker_items;
            INSERT INTO identity_broker_items (service, access_group, key, version, value)
            SELECT 'tool', '', 'k' || i, NULL, decode(repeat('cd', 1300), 'hex') FROM generate_series(1, \(unseenRows)) AS i;
            """, database: database)
    }

    /// The shared pages `execute` hit or read in its scans of the items table.
    private func pagesTouched(prepare: String, execute: String, inRolledBackTransaction: Bool = false) throws -> Int {
        let explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) \(execute)"
        let script = inRolledBackTransaction
            ? "\(prepare);\nBEGIN;\n\(explain);\nROLLBACK;"
            : "\(prepare);\n\(explain);"
        let output = try server.psql(script, database: database)
        guard let start = output.firstIndex(of: "["), let end = output.lastIndex(of: "]"),
              let plans = try JSONSerialization.jsonObject(with: Data(output[start...end].utf8)) as? [[String: Any]],
              let plan = plans.first?["Plan"] as? [String: Any]
        else {
            XCTFail("no plan in psql's output: \(output)")
            return .max
        }
        return Self.pages(in: plan)
    }

    /// Sums the pages of every scan of the items table in `node` and below it.
    private static func pages(in node: [String: Any]) -> Int {
        var total = 0
        if node["Relation Name"] as? String == "identity_broker_items", (node["Node Type"] as? String)?.hasSuffix("Scan") == true {
            total += (node["Shared Hit Blocks"] as? Int ?? 0) + (node["Shared Read Blocks"] as? Int ?? 0)
        }
        for child in node["Plans"] as? [[String: Any]] ?? [] { total += pages(in: child) }
        return total
    }
}
