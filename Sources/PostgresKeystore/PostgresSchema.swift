import Logging
import PostgresNIO
import SecureStorage

/// The engine's tables, created on first use, and the statements every instance shares.
///
/// ```sql
/// identity_broker_schema(singleton, version)              -- one row: the schema version
/// identity_broker_items(service, access_group, key,       -- sealed items; access_group is ''
///                       version, value bytea)             -- for AccessGroup.none
/// identity_broker_changes(seq bigserial, service,         -- the change feed's log
///                         access_group, key, origin, committed_at)
/// identity_broker_key_salts(access_group, salt bytea)     -- passphrase salt + scrypt parameters
/// ```
///
/// Creation runs in one transaction under a transaction-scoped advisory lock, so instances
/// starting together on an empty database do not race on `CREATE TABLE IF NOT EXISTS`.
/// The version row lets a later release migrate; a database whose version is newer than
/// this release knows is refused.
enum PostgresSchema {
    static let version = 1

    /// The `NOTIFY` channel every commit signals on; the payload names the namespace.
    static let channel = "identity_broker_changes"

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
        CREATE TABLE IF NOT EXISTS identity_broker_changes (
            seq bigserial PRIMARY KEY,
            service text NOT NULL,
            access_group text NOT NULL,
            key text NOT NULL,
            origin bigint NOT NULL,
            committed_at timestamptz NOT NULL DEFAULT now()
        )
        """,
        """
        CREATE INDEX IF NOT EXISTS identity_broker_changes_namespace
            ON identity_broker_changes (service, access_group, seq)
        """,
        """
        CREATE TABLE IF NOT EXISTS identity_broker_key_salts (
            access_group text PRIMARY KEY,
            salt bytea NOT NULL
        )
        """,
    ]

    /// Creates what is missing and checks the schema version, in one transaction.
    static func install(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("BEGIN", logger: logger)
        do {
            try await connection.query("SELECT pg_advisory_xact_lock(\(schemaLock))", logger: logger)
            for statement in createStatements {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
            try await connection.query(
                "INSERT INTO identity_broker_schema (version) VALUES (\(version)) ON CONFLICT (singleton) DO NOTHING",
                logger: logger)
            let rows = try await connection.query("SELECT version FROM identity_broker_schema", logger: logger).collect()
            let stored = try rows.first?.decode(Int.self) ?? version
            guard stored <= version else {
                throw KeystoreError(.corruptFormat, "the database's identity_broker schema version \(stored) is newer than this release supports (\(version))")
            }
            try await connection.query("COMMIT", logger: logger)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    /// Takes the namespace's transaction-scoped advisory lock, ordering its commits.
    static func lock(_ namespace: PostgresNamespace, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_advisory_xact_lock(hashtextextended(\(namespace.lockName), 0))", logger: logger)
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

    /// Appends change rows for `keys`, signals listeners, and returns the newest sequence.
    static func appendChanges(
        _ keys: [String], namespace: PostgresNamespace, origin: Int64, on connection: PostgresConnection, logger: Logger
    ) async throws -> Int64? {
        guard !keys.isEmpty else { return nil }
        let rows = try await connection.query("""
            INSERT INTO identity_broker_changes (service, access_group, key, origin)
            SELECT \(namespace.service), \(namespace.groupColumn), changed.key, \(origin)
            FROM unnest(\(keys)::text[]) WITH ORDINALITY AS changed(key, position) ORDER BY changed.position
            RETURNING seq
            """, logger: logger).collect()
        try await connection.query("SELECT pg_notify(\(channel), \(namespace.notificationPayload))", logger: logger)
        return try rows.map { try $0.decode(Int64.self) }.max()
    }

    /// The newest change sequence of a namespace (0 when it has none).
    static func newestSequence(_ namespace: PostgresNamespace, on connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        let rows = try await connection.query("""
            SELECT coalesce(max(seq), 0) FROM identity_broker_changes
            WHERE service = \(namespace.service) AND access_group = \(namespace.groupColumn)
            """, logger: logger).collect()
        return try rows.first?.decode(Int64.self) ?? 0
    }

    /// Deletes change rows older than `retention`, for every namespace.
    static func trimChanges(olderThan retention: Duration, on connection: PostgresConnection, logger: Logger) async throws {
        let seconds = Double(retention.components.seconds) + Double(retention.components.attoseconds) / 1e18
        try await connection.query(
            "DELETE FROM identity_broker_changes WHERE committed_at < now() - make_interval(secs => \(seconds))",
            logger: logger)
    }
}
