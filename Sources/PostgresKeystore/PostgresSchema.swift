import Logging
import PostgresNIO
import SecureStorage

/// The engine's tables, created on first use, and the statements every instance shares.
///
/// ```sql
/// identity_broker_schema(singleton, version)              -- one row: the schema version
/// identity_broker_items(service, access_group, key,       -- sealed items; access_group is ''
///                       version, value bytea)             -- for AccessGroup.none
/// identity_broker_key_salts(access_group, salt bytea)     -- passphrase salt + scrypt parameters
/// identity_broker_commit_<hash>(…)                       -- procedure: a commit's statement, then COMMIT
/// ```
///
/// Creation runs in one transaction under a transaction-scoped advisory lock, so instances
/// starting together on an empty database do not race on `CREATE TABLE IF NOT EXISTS`.
/// The version row lets a later release migrate; a database whose version is newer than
/// this release knows is refused.
///
/// Version 2 dropped version 1's change log (`identity_broker_changes`): the change feed now
/// learns the changed keys from the notifications themselves, so a commit writes nothing but
/// the items.
///
/// The commit procedure is not versioned with the tables: it is created wherever it is
/// missing, and releases that commit in transactions of their own ignore it.
enum PostgresSchema {
    static let version = 2

    /// The `NOTIFY` channel every commit signals on; the payload names the namespace, the
    /// committing instance and the keys (see ``PostgresNamespace/notification(origin:keys:)``).
    static let channel = "identity_broker_changes"

    /// PostgreSQL refuses a `NOTIFY` payload of this many bytes or more.
    static let maximumPayloadBytes = 8000

    /// The keys one notification of a commit carries, in bytes with its header, before the
    /// next notification starts: a group of up to 256 session keys (~140 are enough) would
    /// overflow one payload, and `*` in its place makes every other instance reload every
    /// session it caches. A chunk can end one key past this, so it stays far enough below
    /// ``maximumPayloadBytes`` for the longest key.
    static let payloadChunkBytes = 7000

    /// An item's `value` as every read takes it: an empty value in place of one larger than
    /// ``Sealing/maximumSealedBytes`` (never sealed by this keystore: another role may have
    /// written it), so the server never sends it. An empty value is never sealed either;
    /// ``PostgresNamespace/open(_:forKey:)`` reports both as that item's damage.
    static let cappedValue = "CASE WHEN pg_catalog.octet_length(value) <= \(Sealing.maximumSealedBytes) THEN value ELSE ''::bytea END"

    /// The advisory lock key that serialises schema creation ("IBSCHEMA" in ASCII).
    static let schemaLock: Int64 = 0x49_42_53_43_48_45_4D_41

    static let createStatements: [String] = [
        """
        CREATE TABLE IF NOT EXISTS identity_broker_schema (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            version integer NOT NULL
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS identity_broker_items (
            service text NOT NULL,
            access_group text NOT NULL,
            key text NOT NULL,
            version bigint,
            value bytea NOT NULL,
            PRIMARY KEY (service, access_group, key)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS identity_broker_key_salts (
            access_group text PRIMARY KEY,
            salt bytea NOT NULL
        )
        """,
    ]

    /// The procedure every commit calls (``commitCall(inSchema:)``), named after its parameters and
    /// body: a release that changes either gets a procedure of its own, created beside the
    /// one earlier instances still call, never a stale body under a familiar name.
    static let commitProcedure = "identity_broker_commit_" + fingerprint(commitProcedureParameters + commitProcedureBody)

    /// ``ApplyDistinct``'s parameter types, which the procedure takes first, then the fence
    /// (``ServerClock``).
    private static let commitInputTypes = ["text", "text", "text[]", "int8[]", "bool[]", "bytea[]", "text[]", "text", "int8"]
    /// The procedure's results (`INOUT`: a procedure before PostgreSQL 14 has no `OUT`): the
    /// keys set and removed, and the server's clock as the call ended (``ServerClock``).
    private static let commitResults = [
        (name: "applied_keys", type: "text[]"), (name: "removed_keys", type: "text[]"), (name: "server_clock", type: "int8"),
    ]

    /// The commit procedure's argument types, as `to_regprocedure` names it.
    static let commitProcedureSignature =
        "\(commitProcedure)(\((commitInputTypes + commitResults.map(\.type)).joined(separator: ", ")))"

    private static let commitProcedureParameters =
        (commitInputTypes + commitResults.map { "INOUT \($0.name) \($0.type)" }).joined(separator: ", ")

    private static let commitProcedureBody = """
        DECLARE
            notices_sent bigint;
        BEGIN
            server_clock := \(ServerClock.sql);
            IF server_clock OPERATOR(pg_catalog.>) $9 THEN
                RAISE EXCEPTION USING ERRCODE = '\(ServerClock.lateState)',
                    MESSAGE = 'identity_broker: the commit started after its deadline; nothing was written';
            END IF;
            \(ApplyDistinct.changes) SELECT \(ApplyDistinct.results) INTO applied_keys, removed_keys, notices_sent;
            COMMIT;
            -- Read again for the caller's next fence: the call may have waited for a row
            -- lock or the WAL flush since it started.
            server_clock := \(ServerClock.sql);
        END
        """

    /// ``ApplyDistinct``, then `COMMIT`, inside the server, created in `schema` (quoted: the
    /// items table's): a `CALL` of it commits before it answers, so a commit the server
    /// refuses (a full `NOTIFY` queue, a serialisation failure) fails the `CALL` itself, and a
    /// commit is one round trip instead of three (`BEGIN`, the statement, `COMMIT`). No `SET`
    /// clause: a procedure with one may not `COMMIT`.
    static func createCommitProcedure(inSchema schema: String) -> String {
        """
        CREATE PROCEDURE \(schema).\(commitProcedure)(\(commitProcedureParameters))
        LANGUAGE plpgsql AS $procedure$\(commitProcedureBody)$procedure$
        """
    }

    /// The commit, on the procedure in `schema` (quoted: the one ``install(on:logger:)``
    /// checked): ``ApplyDistinct``'s eight parameters, the fence, and typed `NULL`s for the
    /// results.
    /// Qualified, so a procedure of that name planted in a schema earlier on the search path
    /// is never reached; typed, so an overload in the same schema could only make the call
    /// ambiguous (an error), and the check refuses one at open.
    ///
    /// In autocommit a statement's rows come back before the server commits it, and
    /// postgres-nio reports them as a success even when that commit then fails; the `CALL`
    /// commits before it answers. Sent unnamed (not prepared): parsing a `CALL` costs the
    /// server next to nothing (PL/pgSQL keeps the statement's plan per connection), and an
    /// unnamed statement goes out in one message, after the closed-connection check.
    static func commitCall(inSchema schema: String) -> String {
        let arguments = commitInputTypes.indices.map { "$\($0 + 1)" } + commitResults.map { "NULL::\($0.type)" }
        return "CALL \(schema).\(commitProcedure)(\(arguments.joined(separator: ", ")))"
    }

    /// 16 hex digits of the FNV-1a hash of `text`: a name that changes with it (not a
    /// security measure: who owns the procedure is checked, see ``commitProcedureCheck``).
    static func fingerprint(_ text: String) -> String {
        let hash = text.utf8.reduce(UInt64(0xcbf2_9ce4_8422_2325)) { ($0 ^ UInt64($1)) &* 0x0000_0100_0000_01b3 }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Whether every table exists (as the search path finds them, like the unqualified
    /// statements that use them).
    static let tablesExist = """
        SELECT pg_catalog.to_regclass('identity_broker_schema') IS NOT NULL AND pg_catalog.to_regclass('identity_broker_items') IS NOT NULL
            AND pg_catalog.to_regclass('identity_broker_key_salts') IS NOT NULL
        """

    /// The items table's schema (quoted), where the commit procedure lives, and, when it is
    /// there, who owns it, whether that may be trusted, and whether this role may call it. Trusted: the owner of the items table, a superuser, or this role itself (a
    /// procedure runs with its caller's rights, so one of its own is no plant). Before
    /// PostgreSQL 15 any role may create in `public`, so a member of the database could
    /// otherwise plant a procedure of that name before a fleet first needs it, and acknowledge
    /// commits it never applied. A role that may not call it would fail every commit: it fails
    /// the open instead.
    ///
    /// Also counts the routines of that name in its schema: an overload beside it (with a
    /// defaulted extra parameter, say) could capture or block the call.
    static let commitProcedureCheck = """
        SELECT pg_catalog.quote_ident(n.nspname::text), pg_catalog.pg_get_userbyid(p.proowner),
            p.proowner = c.relowner OR r.rolsuper OR pg_catalog.pg_get_userbyid(p.proowner) = current_user,
            pg_catalog.has_function_privilege(p.oid, 'EXECUTE'),
            (SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc o WHERE o.proname = p.proname AND o.pronamespace = p.pronamespace)
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            LEFT JOIN pg_catalog.pg_proc p
                ON p.oid = pg_catalog.to_regprocedure(pg_catalog.quote_ident(n.nspname::text) || '.\(commitProcedureSignature)')::oid
            LEFT JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
        WHERE c.oid = pg_catalog.to_regclass('identity_broker_items')::oid
        """

    /// Creates what is missing and checks the schema version and who owns what the keystore
    /// will use; returns the commit's `CALL` (``commitCall(inSchema:)``) on the procedure it
    /// checked.
    ///
    /// An open that finds everything in place (the common case) takes no lock: any role that
    /// can connect may take the schema lock and hold it, which would otherwise stall every
    /// open until its statement timeout. Creating (or upgrading) runs in one transaction
    /// under that lock.
    ///
    /// The `CREATE` statements run only when a table is missing: PostgreSQL checks the
    /// schema's `CREATE` privilege before it looks for an existing table, so even `CREATE
    /// TABLE IF NOT EXISTS` would refuse a role that has only `SELECT`, `INSERT`, `UPDATE`
    /// and `DELETE` on tables an owner created.
    static func install(on connection: PostgresConnection, logger: Logger) async throws -> (call: String, schema: String) {
        // Tables found are checked before anything is created beside them (a procedure).
        let found = try await connection.query(PostgresQuery(unsafeSQL: tablesExist), logger: logger).collect()
        let tablesFound = try found.first?.decode(Bool.self) == true
        var schema: String?
        if tablesFound {
            let checked = try await checkTableOwners(on: connection, logger: logger)
            try await pinSearchPath(checked, on: connection, logger: logger)
            schema = checked
        }
        let call: String
        var created = false
        if tablesFound, let found = try await installed(on: connection, logger: logger) {
            call = found
        } else {
            (call, created) = try await PostgresKeystore.transaction(on: connection, logger: logger) {
                _ = try await connection.query("SELECT pg_catalog.pg_advisory_xact_lock(\(schemaLock))", logger: logger).collect()
                let existing = try await connection.query(PostgresQuery(unsafeSQL: tablesExist), logger: logger).collect()
                let creating = try existing.first?.decode(Bool.self) != true
                if creating {
                    for statement in createStatements {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                }
                var stored = try await storedVersion(on: connection, logger: logger)
                if stored == nil {
                    try await connection.query(
                        "INSERT INTO identity_broker_schema (version) VALUES (\(version)) ON CONFLICT (singleton) DO NOTHING",
                        logger: logger)
                    stored = try await storedVersion(on: connection, logger: logger)
                }
                if stored == 1 {
                    // Version 1 instances still running fail their commits from now on (the table
                    // is gone) instead of writing rows no version-2 feed would read.
                    try await connection.query("DROP TABLE IF EXISTS identity_broker_changes", logger: logger)
                    try await connection.query("UPDATE identity_broker_schema SET version = \(version)", logger: logger)
                }
                guard let call = try await checkCommitProcedure(on: connection, creating: true, logger: logger) else {
                    throw UnusableCommitProcedure.missing
                }
                return (call, creating)
            }
        }
        if !tablesFound {
            let checked = try await checkTableOwners(on: connection, logger: logger)
            try await pinSearchPath(checked, on: connection, logger: logger)
            schema = checked
            if created {
                // Said once per database, where someone may look: tables created elsewhere than
                // before (a role whose search_path changed) would otherwise make every saved
                // session seem gone without a word.
                logger.notice(
                    "created the keystore's tables in schema \(checked): the first use of this database, or the role's search_path no longer leads to the schema that held them",
                    metadata: ["broker.schema": "\(checked)"])
            }
        }
        guard let schema else { throw UnusableCommitProcedure.missing }
        return (call, schema)
    }

    /// Makes `schema` (quoted), the one ``checkTableOwners(on:logger:)`` checked, the
    /// session's only schema: its statements name their tables unqualified, and the default
    /// path could find tables another role creates later ahead of them (a schema named after
    /// this role, `public` where every role may create). The pool's connections are pinned
    /// the same way (``ConnectionSetup``).
    static func pinSearchPath(_ schema: String, on connection: PostgresConnection, logger: Logger) async throws {
        _ = try await connection.query("SELECT pg_catalog.set_config('search_path', \(schema), false)", logger: logger).collect()
    }

    /// The commit's `CALL` when, the tables being there, the current schema version and the
    /// commit procedure are in place too; `nil` when something must be created or upgraded.
    private static func installed(on connection: PostgresConnection, logger: Logger) async throws -> String? {
        guard try await storedVersion(on: connection, logger: logger) == version else { return nil }
        return try await checkCommitProcedure(on: connection, creating: false, logger: logger)
    }

    /// The schema version row's value, `nil` when there is none; throws for one newer than
    /// this release knows.
    private static func storedVersion(on connection: PostgresConnection, logger: Logger) async throws -> Int? {
        let rows = try await connection.query("SELECT version FROM identity_broker_schema", logger: logger).collect()
        guard let stored = try rows.first?.decode(Int.self) else { return nil }
        guard stored <= version else {
            throw KeystoreError(.corruptFormat, "the database's identity_broker schema version \(stored) is newer than this release supports (\(version))")
        }
        return stored
    }

    /// Who owns the items table the search path finds and its schema; whether the table's
    /// owner may be trusted; whether every role may create objects in that schema; whether the
    /// schema is named after this role without belonging to it; and whether the three tables
    /// sit in one schema.
    ///
    /// The statements name their tables unqualified, so they use whatever tables the search
    /// path finds first, and the commit procedure is trusted when the table's owner owns it.
    /// The operator chooses the search path and who may create in its schemas, except in two
    /// places another role can reach on its own: `public` where `PUBLIC` may create (before
    /// PostgreSQL 15, by default), and a schema named after this role, which `"$user"` puts
    /// first on the default path (any role with `CREATE` on the database can make it). Tables
    /// planted there would see every write and answer every read and commit as the planter
    /// liked. So the items table must belong to this role, a role it is a member of, or a
    /// superuser; or else sit in a schema where `PUBLIC` may not create and that is not such a
    /// squatted `"$user"` schema (an owner role, or a migration tool's, creating the tables in
    /// a schema of its own). The other two tables must be in the same schema: found elsewhere
    /// (a salts table placed earlier on the path), they would escape the check.
    static let tableOwnersCheck = """
        SELECT pg_catalog.quote_ident(n.nspname::text), pg_catalog.pg_get_userbyid(c.relowner),
            pg_catalog.pg_get_userbyid(n.nspowner),
            pg_catalog.pg_has_role(current_user, c.relowner, 'MEMBER') OR t.rolsuper,
            pg_catalog.has_schema_privilege('public', n.oid, 'CREATE'),
            n.nspname = current_user AND NOT pg_catalog.pg_has_role(current_user, n.nspowner, 'MEMBER') AND NOT s.rolsuper,
            (SELECT pg_catalog.count(*) FROM pg_catalog.pg_class o
                WHERE o.relnamespace = c.relnamespace
                    AND o.oid IN (pg_catalog.to_regclass('identity_broker_schema')::oid,
                        pg_catalog.to_regclass('identity_broker_key_salts')::oid)) = 2
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_catalog.pg_roles t ON t.oid = c.relowner
            JOIN pg_catalog.pg_roles s ON s.oid = n.nspowner
        WHERE c.oid = pg_catalog.to_regclass('identity_broker_items')::oid
        """

    /// - Returns: The tables' schema, quoted as an identifier where it needs to be.
    @discardableResult
    private static func checkTableOwners(on connection: PostgresConnection, logger: Logger) async throws -> String {
        let rows = try await connection.query(PostgresQuery(unsafeSQL: tableOwnersCheck), logger: logger).collect()
        guard let (schema, tableOwner, schemaOwner, tableTrusted, publicCreates, squatted, together) =
            try rows.first?.decode((String, String, String, Bool, Bool, Bool, Bool).self)
        else { throw UnusableCommitProcedure.missing }
        guard together else { throw UntrustedTables(schema: schema, tableOwner: tableOwner, reason: .split) }
        if tableTrusted || (!publicCreates && !squatted) { return schema }
        throw UntrustedTables(
            schema: schema, tableOwner: tableOwner,
            reason: publicCreates ? .everyRoleCreates : .squatted(schemaOwner: schemaOwner))
    }

    /// Whether `length()` counts bytes on this database (its encoding is `SQL_ASCII`, whose
    /// text the server neither checks nor converts), so notifications' key lengths do too.
    static func countsBytes(on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let rows = try await connection.query("SELECT pg_catalog.current_setting('server_encoding')", logger: logger).collect()
        return try rows.first?.decode(String.self) == "SQL_ASCII"
    }

    /// Checks the commit procedure and returns its `CALL`; when it is missing, creates it
    /// if `creating`, and otherwise returns `nil`.
    private static func checkCommitProcedure(on connection: PostgresConnection, creating: Bool, logger: Logger) async throws -> String? {
        for attempt in 1...2 {
            let rows = try await connection.query(PostgresQuery(unsafeSQL: commitProcedureCheck), logger: logger).collect()
            guard let (schema, owner, trusted, callable, named) = try rows.first?.decode((String, String?, Bool?, Bool?, Int?).self) else {
                throw UnusableCommitProcedure.missing
            }
            guard let owner, let trusted, let callable, let named else {
                // Not there yet: created in the items table's schema, then checked like any other.
                guard creating else { return nil }
                guard attempt == 1 else { throw UnusableCommitProcedure.missing }
                try await connection.query(PostgresQuery(unsafeSQL: createCommitProcedure(inSchema: schema)), logger: logger)
                continue
            }
            guard trusted else { throw UnusableCommitProcedure.planted(owner: owner) }
            guard named == 1 else { throw UnusableCommitProcedure.overloaded(count: named) }
            guard callable else { throw UnusableCommitProcedure.notCallable }
            return commitCall(inSchema: schema)
        }
        throw UnusableCommitProcedure.missing
    }

    /// Locks `namespaces` (a migration's two) against other migrations until the transaction
    /// ends: their key-check rows, `FOR UPDATE`, in byte order, so two opposite migrations
    /// cannot deadlock. Rows, not advisory locks: any role that can connect may take an
    /// advisory lock (its key is predictable) and hold every migration back; only a role that
    /// may update the table can lock its rows. Both rows exist (each namespace's key was
    /// checked first); one removed since fails the migration rather than letting it run
    /// without that lock.
    static func lockForMigration(_ namespaces: [PostgresNamespace], on connection: PostgresConnection, logger: Logger) async throws {
        guard let service = namespaces.first?.service else { return }
        let columns = namespaces.map(\.groupColumn)
        let locked = try await connection.query("""
            SELECT 1 FROM identity_broker_items
            WHERE service = \(PostgresKeyCheck.service) AND key = \(service) AND access_group = ANY(\(columns))
            ORDER BY access_group COLLATE "C" FOR UPDATE
            """, logger: logger).collect()
        guard locked.count == Set(columns.map(ItemKey.Exact.init)).count else {
            throw KeystoreError(
                .migrationFailed,
                "a key check of the two access groups was removed while the migration started (another role that may write the table); nothing was moved: run it again")
        }
    }

    /// Applies sets and removes of distinct keys, and notifies listeners of the keys that
    /// changed, in one statement, inside the caller's transaction (a migration's).
    ///
    /// The caller guarantees every key occurs once (`ON CONFLICT` cannot touch a row twice in
    /// one statement). The notification is built in SQL because only the statement knows
    /// which sets the versioned rule let through; with nothing changed there is none.
    ///
    /// - Returns: The keys whose set applied and the keys that were removed.
    static func applyDistinct(
        sets: [(key: String, version: Int64?, sealed: [UInt8])], removes: [String],
        namespace: PostgresNamespace, origin: Int64, on connection: PostgresConnection, logger: Logger
    ) async throws -> (sets: [String], removes: [String]) {
        let statement = ApplyDistinct(sets: sets, removes: removes, namespace: namespace, origin: origin)
        return setsAndRemoves(try await run(statement, on: connection, logger: logger))
    }

    /// ``applyDistinct(sets:removes:namespace:origin:on:logger:)`` committed by the server
    /// before it answers (``commitCall(inSchema:)``), on a connection in no transaction,
    /// unless it starts after `fence`; throws
    /// ``StaleConnection`` without sending anything on one already closed.
    ///
    /// An error the server answers with applied nothing, but for a statement timeout (or a
    /// cancellation) that the server could only act on once the procedure's `COMMIT` was done:
    /// it holds interrupts while it commits, WAL flush included. That fails a call that
    /// applied, as an answer after the caller's deadline does; repeating it is harmless under
    /// the versioned rule. A connection lost under the call leaves the outcome unknown.
    ///
    /// The server refuses the call, applying nothing, once its clock is past `fence`
    /// (``ServerClock``; SQLSTATE ``ServerClock/lateState``).
    ///
    /// - Returns: The keys set and removed, and the server's clock as the call ended.
    static func commitDistinct(
        sets: [(key: String, version: Int64?, sealed: [UInt8])], removes: [String],
        namespace: PostgresNamespace, origin: Int64, call: String, fence: Int64, on connection: PostgresConnection, logger: Logger
    ) async throws -> (sets: [String], removes: [String], clock: ServerClock?) {
        let apply = ApplyDistinct(sets: sets, removes: removes, namespace: namespace, origin: origin)
        var bindings = apply.makeBindings()
        bindings.append(fence)
        let result = try await connection.queryUnlessClosed(PostgresQuery(unsafeSQL: call, binds: bindings), logger: logger)
        let answeredAt = ContinuousClock.now
        let rows = try result.rows.map { try $0.decode(([String]?, [String]?, Int64?).self) }
        let (sets, removes) = setsAndRemoves(rows.map { ($0.0, $0.1) })
        return (sets, removes, rows.first?.2.map { ServerClock(microseconds: $0, answeredAt: answeredAt) })
    }

    /// The keys set and removed, from the one row of ``ApplyDistinct`` or ``commitCall(inSchema:)``,
    /// as the server lists them (each once, as bytes tell them apart).
    private static func setsAndRemoves(_ rows: [([String]?, [String]?)]) -> (sets: [String], removes: [String]) {
        (rows.first?.0 ?? [], rows.first?.1 ?? [])
    }

    /// Runs `statement` prepared: postgres-nio parses it once per connection, and the server
    /// plans it once (``ConnectionSetup``).
    static func run<Statement: PostgresPreparedStatement>(
        _ statement: Statement, on connection: PostgresConnection, logger: Logger
    ) async throws -> [Statement.Row] {
        var rows: [Statement.Row] = []
        for try await row in try await connection.execute(statement, logger: logger) { rows.append(row) }
        return rows
    }

    /// The commit statement, prepared once per connection (postgres-nio keeps it by name) and
    /// run on its generic plan (``ConnectionSetup``), so the server parses and plans it once.
    ///
    /// The removes are two deletes, of which at most one finds anything to do:
    /// - no key (every federation's commit) or one key (a clear): the full primary key, a
    ///   `NULL` one when there is nothing to remove, which ends the index scan at once. A
    ///   single `key = ANY($7)` delete was planned, on a table never analysed (a new
    ///   database until autovacuum's first pass), as a scan of the whole namespace filtered
    ///   by key, and that scan ran in every commit, removes or not: 0.6 ms per commit at
    ///   3,000 items, growing with the namespace (`PostgresQueryPlanTests`).
    /// The upserts go in byte order (`ORDER BY key COLLATE "C"`, the server encoding's bytes,
    /// as every other lock of the keystore's): on a database in a multibyte encoding other
    /// than UTF-8 (EUC_JP, EUC_KR, …), the client's order (UTF-8 bytes) differs, and a commit
    /// setting two such keys locked them against a migration's order, which could deadlock
    /// (the migration then failed).
    /// A statement that both sets and removes first locks the existing rows of all its keys in
    /// byte order (`locked`: one index probe per key, in a sorted `unnest`, gated on both
    /// arrays being non-empty, so a federation's commit skips it), and every write waits for
    /// that (`(SELECT count(*) FROM locked) >= 0`, evaluated once before its first row): its
    /// upserts and its removes each go in byte order, but one run after the other, which
    /// against a migration holding one row of each would be a cycle.
    ///
    /// - several keys (concurrent clears combined), gated on the array's length: the rows
    ///   are first locked in byte order (`ORDER BY key COLLATE "C" FOR UPDATE`, run to its
    ///   end as the `ARRAY(…)` the delete's `key = ANY` takes), the order the upserts and a
    ///   migration lock theirs in: the delete's own index scan goes in the column's
    ///   collation order, which under a database collation other than `C` differs, and a
    ///   migration holding one row while this statement held another would deadlock. The
    ///   delete is by key, not by the rows the lock returned, unlike ``ReadMany``'s form, so
    ///   it removes the newest version of a row another instance rewrote meanwhile. Once the table has statistics,
    ///   the generic plan (``ConnectionSetup``) sizes the namespace from the table's average,
    ///   so the keys stay in the index condition; before the first `ANALYZE`, or in a table
    ///   of many tiny namespaces and one huge one, this delete can still scan its namespace.
    struct ApplyDistinct: PostgresPreparedStatement {
        static let name = "identity_broker_apply_distinct_v\(PostgresSchema.version)"
        static let sql = "\(changes) SELECT \(results)"

        /// The statement's common table expressions: the writes and the notifications.
        static let changes = """
            WITH locked AS MATERIALIZED (
                SELECT row.key FROM (
                    SELECT wanted.key FROM pg_catalog.unnest(pg_catalog.array_cat($3::text[], $7::text[])) AS wanted(key)
                    ORDER BY wanted.key COLLATE "C"
                ) AS wanted CROSS JOIN LATERAL (
                    SELECT key FROM identity_broker_items
                    WHERE service = $1 AND access_group = $2 AND key = wanted.key
                    FOR UPDATE
                ) AS row
                WHERE pg_catalog.cardinality($3::text[]) > 0 AND pg_catalog.cardinality($7::text[]) > 0
            ), upserted AS (
                INSERT INTO identity_broker_items AS items (service, access_group, key, version, value)
                SELECT $1, $2, s.key, CASE WHEN s.versioned THEN s.version END, s.value
                FROM ROWS FROM (pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::int8[]), pg_catalog.unnest($5::bool[]),
                    pg_catalog.unnest($6::bytea[])) AS s(key, version, versioned, value)
                WHERE (SELECT pg_catalog.count(*) FROM locked) >= 0
                ORDER BY s.key COLLATE "C"
                ON CONFLICT (service, access_group, key) DO UPDATE SET version = excluded.version, value = excluded.value
                WHERE items.version IS NULL OR excluded.version IS NULL OR items.version <= excluded.version
                RETURNING items.key
            ), removed_one AS (
                DELETE FROM identity_broker_items
                WHERE service = $1 AND access_group = $2
                    AND key = CASE WHEN pg_catalog.cardinality($7::text[]) = 1 THEN ($7::text[])[1] END
                    AND (SELECT pg_catalog.count(*) FROM locked) >= 0
                RETURNING key
            ), removed_many AS (
                DELETE FROM identity_broker_items
                WHERE pg_catalog.cardinality($7::text[]) > 1 AND service = $1 AND access_group = $2
                    AND (SELECT pg_catalog.count(*) FROM locked) >= 0
                    AND key = ANY(ARRAY(
                        SELECT key FROM identity_broker_items
                        WHERE pg_catalog.cardinality($7::text[]) > 1 AND service = $1 AND access_group = $2
                            AND key = ANY($7::text[])
                        ORDER BY key COLLATE "C" FOR UPDATE))
                RETURNING key
            ), removed AS (
                SELECT key FROM removed_one UNION ALL SELECT key FROM removed_many
            ), records AS (
                SELECT pg_catalog.length(c.key)::text || ':' || c.key AS record
                FROM (SELECT key FROM upserted UNION ALL SELECT key FROM removed) AS c
            ), placed AS (
                SELECT record, pg_catalog.sum(pg_catalog.octet_length(record)) OVER (ORDER BY record ROWS UNBOUNDED PRECEDING) AS ending
                FROM records
            ), changed AS (
                SELECT $8 || pg_catalog.string_agg(record, '' ORDER BY record) AS payload
                FROM placed
                GROUP BY (ending - 1) / (\(PostgresSchema.payloadChunkBytes) - pg_catalog.octet_length($8))
            )
            """
        /// The keys set, the keys removed, and how many notifications were sent.
        static let results = """
            (SELECT pg_catalog.array_agg(key) FROM upserted), (SELECT pg_catalog.array_agg(key) FROM removed),
                (SELECT pg_catalog.count(*) FROM changed, pg_catalog.pg_notify('\(PostgresSchema.channel)', CASE
                    WHEN pg_catalog.octet_length(changed.payload) < \(PostgresSchema.maximumPayloadBytes) THEN changed.payload
                    ELSE $8 || '*' END) AS notified)
            """
        typealias Row = ([String]?, [String]?)

        let service: String
        let group: String
        let keys: [String]
        let versions: [Int64]
        let versioned: [Bool]
        let values: [ByteBuffer]
        let removes: [String]
        let header: String

        init(
            sets: [(key: String, version: Int64?, sealed: [UInt8])], removes: [String],
            namespace: PostgresNamespace, origin: Int64
        ) {
            service = namespace.service
            group = namespace.groupColumn
            keys = sets.map(\.key)
            versions = sets.map { $0.version ?? 0 }
            versioned = sets.map { $0.version != nil }
            values = sets.map { ByteBuffer(bytes: $0.sealed) }
            self.removes = removes
            header = namespace.notificationHeader(origin: origin)
        }

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 8)
            bindings.append(service)
            bindings.append(group)
            bindings.append(keys)
            bindings.append(versions)
            bindings.append(versioned)
            bindings.append(values)
            bindings.append(removes)
            bindings.append(header)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (applied, removed, _) = try row.decode(([String]?, [String]?, Int64).self)
            return (applied, removed)
        }
    }

    /// The sealed value of one key (the common read: one caller), prepared once per
    /// connection like ``ApplyDistinct``.
    struct ReadOne: PostgresPreparedStatement {
        static let name = "identity_broker_read_one_v\(PostgresSchema.version)"
        static let sql = "SELECT \(PostgresSchema.cappedValue) FROM identity_broker_items WHERE service = $1 AND access_group = $2 AND key = $3"
        typealias Row = ByteBuffer

        let service: String
        let group: String
        let key: String

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(service)
            bindings.append(group)
            bindings.append(key)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(ByteBuffer.self) }
    }

    /// The sealed values of several keys, for combined reads.
    ///
    /// Written as one index look-up per key rather than `key = ANY($3)`: for a namespace the
    /// server's statistics have not seen yet (new, or grown since the last `ANALYZE`), the
    /// planner estimates its `(service, access_group)` prefix at one row and scans all of it,
    /// filtering the keys (measured: 6,200 rows, 3.5 ms per combined read, two thirds of the
    /// server's CPU at c = 64). The same holds for the commit's removes.
    struct ReadMany: PostgresPreparedStatement {
        static let name = "identity_broker_read_many_v\(PostgresSchema.version)"
        static let sql = """
            SELECT r.key, (SELECT \(PostgresSchema.cappedValue) FROM identity_broker_items WHERE service = $1 AND access_group = $2 AND key = r.key)
            FROM pg_catalog.unnest($3::text[]) AS r(key)
            """
        /// A key and its value; `nil` when the key has no item.
        typealias Row = (String, ByteBuffer?)

        let service: String
        let group: String
        let keys: [String]

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(service)
            bindings.append(group)
            bindings.append(keys)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode((String, ByteBuffer?).self) }
    }

    /// Locks the existing rows of `keys` in byte order (`COLLATE "C"`), the order every other
    /// statement and a migration take theirs in, so a transaction that then writes them one
    /// by one in any order cannot wait for another in a cycle. One index probe per key.
    static func lockInByteOrder(
        _ keys: [String], namespace: PostgresNamespace, on connection: PostgresConnection, logger: Logger
    ) async throws {
        _ = try await connection.query("""
            SELECT row.key FROM (
                SELECT wanted.key FROM pg_catalog.unnest(\(keys)::text[]) AS wanted(key) ORDER BY wanted.key COLLATE "C"
            ) AS wanted CROSS JOIN LATERAL (
                SELECT key FROM identity_broker_items
                WHERE service = \(namespace.service) AND access_group = \(namespace.groupColumn) AND key = wanted.key
                FOR UPDATE
            ) AS row
            """, logger: logger).collect()
    }

    /// Upserts one sealed item with the versioned rule; returns whether it was applied.
    static func upsert(
        _ namespace: PostgresNamespace, key: String, version: Int64?, sealed: [UInt8],
        on connection: PostgresConnection, logger: Logger
    ) async throws -> Bool {
        let rows = try await connection.query("""
            INSERT INTO identity_broker_items AS items (service, access_group, key, version, value)
            VALUES (\(namespace.service), \(namespace.groupColumn), \(key), \(version), \(ByteBuffer(bytes: sealed)))
            ON CONFLICT (service, access_group, key) DO UPDATE SET version = excluded.version, value = excluded.value
            WHERE items.version IS NULL OR excluded.version IS NULL OR items.version <= excluded.version
            RETURNING 1
            """, logger: logger).collect()
        return !rows.isEmpty
    }

    /// Deletes one item; returns whether there was one.
    static func delete(_ namespace: PostgresNamespace, key: String, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let rows = try await connection.query("""
            DELETE FROM identity_broker_items
            WHERE service = \(namespace.service) AND access_group = \(namespace.groupColumn) AND key = \(key)
            RETURNING 1
            """, logger: logger).collect()
        return !rows.isEmpty
    }

    /// Signals listeners that `keys` of `namespace` changed (inside a transaction: delivered
    /// when it commits, in commit order). Nothing when no key changed.
    ///
    /// Collected, as every statement that returns rows must be inside a transaction:
    /// postgres-nio answers such a query once the server bound it, and an error raised while
    /// it runs (a statement timeout or a cancel, running out of memory) would otherwise go
    /// unread into its row stream, leaving the transaction aborted for a `COMMIT` that the
    /// server then answers with `ROLLBACK` and no error.
    static func notify(
        _ keys: [String], namespace: PostgresNamespace, origin: Int64, on connection: PostgresConnection, logger: Logger
    ) async throws {
        guard !keys.isEmpty else { return }
        _ = try await connection.query(
            "SELECT pg_catalog.pg_notify(\(channel), \(namespace.notification(origin: origin, keys: keys)))", logger: logger
        ).collect()
    }
}

/// The tables the search path finds may have been planted by another role
/// (``PostgresSchema/tableOwnersCheck``).
struct UntrustedTables: Error, CustomStringConvertible {
    enum Reason {
        /// The items table is in a schema where every role may create.
        case everyRoleCreates
        /// The items table is in a schema named after this role that another role owns.
        case squatted(schemaOwner: String)
        /// The other tables are not in the items table's schema.
        case split
    }

    let schema: String
    let tableOwner: String
    let reason: Reason

    var description: String {
        switch reason {
        case .split:
            return "identity_broker_schema or identity_broker_key_salts is not in schema \(schema), where the search path "
                + "finds identity_broker_items: a table placed earlier on the path escapes the keystore's checks, so this "
                + "keystore does not open; keep the three tables in one schema (see RunningAFleet)"
        case .everyRoleCreates, .squatted:
            let why: String
            if case .squatted(let owner) = reason {
                why = "schema \(schema), named after this role, belongs to role \(owner)"
            } else {
                why = "every role may create objects in schema \(schema)"
            }
            return "identity_broker_items in schema \(schema) belongs to role \(tableOwner), which is neither this role, a role "
                + "it belongs to, nor a superuser, and \(why): another role could have planted the keystore's tables there and "
                + "would see every write and answer every read, so this keystore does not open. Have this role (or a role it "
                + "belongs to) own the tables, or keep them in a schema where PUBLIC may not create "
                + "(REVOKE CREATE ON SCHEMA \(schema) FROM PUBLIC) and that no other role made in this role's name; see RunningAFleet"
        }
    }
}

/// Why the commit procedure is not called: it belongs to a role that is neither the items
/// table's owner, a superuser nor this role (``PostgresSchema/commitProcedureCheck``), this
/// role may not call it, or it is not found where a `CALL` looks.
enum UnusableCommitProcedure: Error, CustomStringConvertible {
    case planted(owner: String)
    case overloaded(count: Int)
    case notCallable
    case missing

    var description: String {
        switch self {
        case .planted(let owner):
            "the commit procedure \(PostgresSchema.commitProcedure) belongs to role \(owner), which is neither the owner "
                + "of identity_broker_items, a superuser nor this role, so this keystore does not open (the procedure could "
                + "have been planted to acknowledge commits it never applies): drop it, or give it to the table's owner "
                + "(ALTER PROCEDURE … OWNER TO …)"
        case .overloaded(let count):
            "\(count) routines are named \(PostgresSchema.commitProcedure) in the schema of identity_broker_items, where "
                + "only the commit procedure should be: another could capture or block its calls, so this keystore does "
                + "not open; drop the others"
        case .notCallable:
            "this role may not call the commit procedure \(PostgresSchema.commitProcedure), which every commit needs: "
                + "GRANT EXECUTE ON PROCEDURE \(PostgresSchema.commitProcedure) (see RunningAFleet)"
        case .missing:
            "the commit procedure \(PostgresSchema.commitProcedure) or identity_broker_items is not found"
        }
    }
}
