import Logging
import PostgresNIO
import SecureStorage
import Synchronization

/// Sets each pooled connection up once, on its first use by a keystore operation.
///
/// Its session runs prepared statements on their generic plan (`plan_cache_mode =
/// force_generic_plan`). Under the default (`auto`) the server planned the commit statement
/// again on every run, because a generic plan's estimate for `unnest` over parameters looks
/// dearer than a custom one: ~0.2 ms of server CPU per commit, on the critical path of every
/// durable federation at c = 1. The plans do not depend on what the arrays hold: the combined
/// read looks each key up on its own, and the removes' index scan keeps its keys in the index
/// condition on the generic plan (`PostgresQueryPlanTests`).
///
/// The setting also covers the unnamed statements postgres-nio sends for `query`: the
/// per-key statements of a transaction (a full primary key: one plan either way) and the key
/// listing, which a generic plan sizes from the table's average namespace.
///
/// It also sets `statement_timeout` to the operation timeout. A call that runs out of time
/// returns to its caller while its statement, already sent, goes on (postgres-nio cannot
/// cancel it); without a limit on the server, a remove held up by a lock or a slow trigger
/// could then apply long after the caller was told it failed, even after a later write of
/// the same key that was acknowledged, and delete it. The server now cancels such a
/// statement (nothing of it applies, unless the timeout comes while a commit's `CALL` is
/// already committing) an operation timeout after it started: that bounds how
/// late it can land (about twice the timeout after its caller gave up, for a statement that
/// waited behind another group), and `FederationClient` re-reads a session for a minute after
/// a write of it failed.
///
/// Last, it pins the settings ``sessionDefaults`` lists (durable commits, `read committed`, no
/// other timeouts). The change feed's listening connection is set up the same way. The same
/// statement reads the server's clock, which fences the connection's commits (``ServerClock``).
///
/// All are set per session rather than as startup parameters, which connection poolers such as
/// PgBouncer refuse unless configured to ignore it (the keystore needs a direct connection or
/// a pooler in session mode anyway, for `LISTEN`), in one statement: one round trip per new
/// connection. A setting the server does not know is left out (``statement(statementTimeoutMilliseconds:)``).
final class ConnectionSetup: Sendable {

    /// The connections already set up, by their pool's ID, with their server's clock as
    /// read then (or since: ``record(_:for:)``).
    private let done = Mutex<[PostgresConnection.ID: ServerClock]>([:])
    /// `statement_timeout`, in whole milliseconds (at least 1: 0 would mean none).
    private let statementTimeoutMilliseconds: Int64
    /// The last refusal of a connection's server (a standby, a server too old) and when it
    /// came. For `holdOff` after it, calls fail with it at once: each would otherwise take a
    /// new connection to the same server, set it up and be refused (a login each, as fast as
    /// calls come, on a server that may be busy with a failover).
    private let lastRefusal = Mutex<(error: any Error & Sendable, at: ContinuousClock.Instant)?>(nil)
    private let holdOff: Duration
    /// The settings pinned, ``sessionDefaults`` and the search path.
    private let defaults: [(name: String, value: String)]

    /// - Parameters:
    ///   - holdOff: How long a server's refusal stands for later calls (the keystore's
    ///     reconnect delay), at most ``longestHoldOff``.
    ///   - searchPath: The schema (quoted as an identifier) to pin as the session's
    ///     `search_path`, or `nil` to leave it (a connection that checks the tables first).
    init(statementTimeout: Duration, holdOff: Duration, searchPath: String? = nil) {
        self.holdOff = min(holdOff, Self.longestHoldOff)
        defaults = Self.sessionDefaults + (searchPath.map { [("search_path", Self.literal($0))] } ?? [])
        let (seconds, attoseconds) = statementTimeout.components
        // The server takes at most INT_MAX milliseconds (about 24.8 days).
        let milliseconds = seconds.multipliedReportingOverflow(by: 1000)
        statementTimeoutMilliseconds = milliseconds.overflow || milliseconds.partialValue >= Int64(Int32.max)
            ? Int64(Int32.max) : max(1, milliseconds.partialValue + attoseconds / 1_000_000_000_000_000)
    }

    /// What the keystore's statements assume of a session, whatever the database or the role
    /// was set to, by setting name:
    /// - `synchronous_commit` raised from `off` to `local`: with `off` the server answers a
    ///   `COMMIT` before its WAL reaches the disk, and a crash loses commits the keystore
    ///   acknowledged. Stronger settings (`on`, `remote_apply`, …) stay. The comparison names
    ///   `pg_catalog`'s operator, so no operator another role planted on the search path can
    ///   capture it.
    /// - `default_transaction_isolation` at `read committed`: every upsert, delete and
    ///   migration relies on it to wait for a row another transaction holds and then apply
    ///   to the row as committed. Under `repeatable read` or `serializable` (which some
    ///   databases default to) such a statement fails with a serialization failure (40001)
    ///   instead, so a federation failed whenever another instance wrote the same session.
    /// - `lock_timeout` and `transaction_timeout` off: the statement timeout already bounds
    ///   every wait, and a shorter lock timeout failed a commit that waited for another
    ///   instance's write of the same session (55P03) where it should converge.
    /// - `idle_session_timeout` off: it ended the change feed's listening connection, which
    ///   runs no statement while it waits, every time it ran out, and each end made every
    ///   client re-read all it cached (the pool closes its idle connections itself).
    static let sessionDefaults: [(name: String, value: String)] = [
        ("synchronous_commit", """
            CASE WHEN pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) 'off'::text THEN 'local' \
            ELSE pg_catalog.current_setting('synchronous_commit') END
            """),
        ("default_transaction_isolation", "'read committed'"),
        ("lock_timeout", "'0'"),
        ("transaction_timeout", "'0'"),
        ("idle_session_timeout", "'0'"),
        ("plan_cache_mode", "'force_generic_plan'"),
    ]

    /// `text` as an SQL escape-string literal (`E'…'`): read the same whatever
    /// `standard_conforming_strings` says, with its backslashes and quotes doubled.
    static func literal(_ text: String) -> String {
        let backslashes = text.split(separator: "\\", omittingEmptySubsequences: false).joined(separator: "\\\\")
        return "E'" + backslashes.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "''") + "'"
    }

    /// The longest a refusal stands: a failover that completes (the address now leads to the
    /// new primary) is then noticed within it, whatever the reconnect delay.
    static let longestHoldOff: Duration = .seconds(1)

    /// The oldest server the keystore's statements run on (`server_version_num`):
    /// PostgreSQL 12, for `WITH … AS MATERIALIZED`.
    static let oldestServerVersion: Int32 = 120_000

    /// The set-up statement: every setting of `defaults` and `statement_timeout` that the
    /// server knows, whether the server is a standby, its version, and its clock
    /// (``ServerClock``). Older servers lack
    /// some settings (`plan_cache_mode` before PostgreSQL 12, `idle_session_timeout` before
    /// 14, `transaction_timeout` before 17); those are left out rather than failing the
    /// statement.
    static func statement(
        statementTimeoutMilliseconds: Int64, defaults: [(name: String, value: String)] = sessionDefaults
    ) -> String {
        // The timeout is a number this type computed: written into the text, not bound.
        let settings = [("statement_timeout", "'\(statementTimeoutMilliseconds)'")] + defaults
        let rows = settings.map { "('\($0.name)', \($0.value)::text)" }.joined(separator: ", ")
        return """
            SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.current_setting('server_version_num')::int4,
                pg_catalog.count(pg_catalog.set_config(wanted.name, wanted.value, false)), \(ServerClock.sql)
            FROM (VALUES \(rows)) AS wanted(name, value)
            WHERE EXISTS (SELECT FROM pg_catalog.pg_settings AS known WHERE known.name OPERATOR(pg_catalog.=) wanted.name)
            """
    }

    /// Why a connection to this server is not used: a server older than
    /// ``oldestServerVersion``, or a standby (it takes no writes); `nil` when it can be.
    static func refusal(standby: Bool, version: Int32) -> (any Error & Sendable)? {
        if version < oldestServerVersion { return UnsupportedServer(version: version) }
        return standby ? StandbyServer() : nil
    }

    /// Sets `connection` up unless it already is. A connection to a standby is closed
    /// (``StandbyServer``): its reads would lag the primary and every write would fail, and
    /// a pool whose connections reached the old primary before a failover would otherwise
    /// keep them for good. For the hold-off after such a refusal, calls fail with it without
    /// touching their connection.
    func prepare(_ connection: PostgresConnection, logger: Logger) async throws {
        guard !done.withLock({ $0[connection.id] != nil }) else { return }
        // Refused a moment ago: this connection is left as it is, for a later call to set
        // up once the refusal is old.
        let holdOff = self.holdOff
        if let recent = lastRefusal.withLock({ last in last.flatMap { .now < $0.at.advanced(by: holdOff) ? $0.error : nil } }) {
            throw recent
        }
        let result = try await connection.queryUnlessClosed(
            PostgresQuery(unsafeSQL: Self.statement(statementTimeoutMilliseconds: statementTimeoutMilliseconds, defaults: defaults)), logger: logger)
        let answeredAt = ContinuousClock.now
        guard let (standby, version, _, clock) = try result.rows.first?.decode((Bool, Int32, Int64, Int64).self) else {
            throw KeystoreError(.io, "the connection's set-up statement returned no row")
        }
        if let refusal = Self.refusal(standby: standby, version: version) {
            lastRefusal.withLock { $0 = (refusal, .now) }
            try? await connection.close()
            throw refusal
        }
        done.withLock { done in
            // Closed connections leave their IDs behind; past a bound, forget them all (a live
            // connection then runs its setup once more, which is harmless).
            if done.count >= 1024 { done.removeAll() }
            done[connection.id] = ServerClock(microseconds: clock, answeredAt: answeredAt)
        }
    }

    /// The server's clock as `connection` last read it; `nil` for one not set up here.
    func clock(of connection: PostgresConnection.ID) -> ServerClock? {
        done.withLock { $0[connection] }
    }

    /// Keeps a newer reading of `connection`'s server clock (one set up here).
    func record(_ clock: ServerClock, for connection: PostgresConnection.ID) {
        done.withLock { done in
            if done[connection] != nil { done[connection] = clock }
        }
    }
}
