import Logging
import PostgresNIO
import SecureStorage

/// A reading of a server's wall clock, taken on one connection, and what it says of the
/// server's clock later: the commit fence's time base.
///
/// A commit's `CALL` carries a fence, the latest server time at which it may still start
/// (``PostgresSchema/commitCall(inSchema:)``). A statement that TCP delivers late (the
/// path dropped packets, then healed: the kernel keeps retransmitting for up to ~15 minutes,
/// even after the connection was closed) would otherwise apply long after its caller was
/// told it failed, past every uncertain window, and a late remove would delete a session
/// written and acknowledged meanwhile. The server refuses a call that starts after its
/// fence, so every commit starts within an operation timeout of being sent, or never.
///
/// The fence is in the server's clock, so the hosts' clocks need not agree: each connection
/// reads the server's clock when it is set up (``ConnectionSetup``), and again with every
/// commit (the procedure returns it, read after its `COMMIT`); a later instant is the last
/// reading plus the time elapsed on this host's monotonic clock since its answer came. That
/// errs early, by the reading's trip back (and either way by the two clocks' drift since the last commit on the
/// connection, parts per million), so the fence is no looser than the operation timeout: a
/// commit is refused only when the server starts it about that long after it was sent, or
/// more. A server clock stepped forward since the reading
/// refuses commits that are on time: the refusal comes back at once, the connection reads the
/// clock again and the commit runs again (``PostgresKeystore/applyDistinct(_:namespace:origin:call:allowance:on:logger:)``).
/// One stepped back loosens the fence by the step until the next commit on the connection.
struct ServerClock: Sendable {
    /// The server's `clock_timestamp()`, in microseconds since 1970.
    let microseconds: Int64
    /// This host's clock when the answer carrying it arrived.
    let answeredAt: ContinuousClock.Instant

    /// The least the server's clock can read at `instant` (it may read more).
    func minimumReading(at instant: ContinuousClock.Instant) -> Int64 {
        Self.saturatingSum(microseconds, Self.microseconds(instant - answeredAt))
    }

    /// The fence for a statement sent at `instant` that must start within `allowance`.
    func fence(sentAt instant: ContinuousClock.Instant, allowance: Duration) -> Int64 {
        Self.saturatingSum(minimumReading(at: instant), Self.microseconds(allowance))
    }

    /// The server's clock in microseconds since 1970, as SQL (`date_part` is a double on every
    /// supported version; microseconds of today's dates fit its 53 bits).
    /// Every operator and type is named in `pg_catalog`: `float8 * int4` has no exact
    /// built-in, so an operator of those types another role planted on the search path
    /// would otherwise be preferred, and run on every commit.
    static let sql = "(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000000::pg_catalog.float8)::pg_catalog.int8"

    /// Reads the server's clock on `connection`.
    static func read(on connection: PostgresConnection, logger: Logger) async throws -> ServerClock {
        let rows = try await connection.queryUnlessClosed(PostgresQuery(unsafeSQL: "SELECT \(sql)"), logger: logger).rows
        guard let microseconds = try rows.first?.decode(Int64.self) else {
            throw KeystoreError(.io, "the server's clock could not be read")
        }
        return ServerClock(microseconds: microseconds, answeredAt: .now)
    }

    private static func saturatingSum(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b < 0 ? .min : .max) : sum
    }

    /// Whole microseconds of `duration`, saturating.
    static func microseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        let whole = seconds.multipliedReportingOverflow(by: 1_000_000)
        guard !whole.overflow else { return seconds < 0 ? .min : .max }
        return saturatingSum(whole.partialValue, attoseconds / 1_000_000_000_000)
    }

    /// The SQLSTATE the commit procedure raises for a call that starts after its fence
    /// (class `IB`: implementation-defined, never PostgreSQL's own).
    static let lateState = "IB001"

    /// Whether `error` is the commit procedure's refusal of a call that started after its fence.
    static func isLateRefusal(_ error: any Error) -> Bool {
        (error as? PSQLError)?.serverInfo?[.sqlState] == lateState
    }
}

extension ConnectionSetup {
    /// The connection a keystore operation runs on, with its set-up (for its clock reading),
    /// while that operation's body runs (``PostgresKeystore/perform(_:pool:deadlines:cancellable:probing:logger:_:)``).
    struct Current: Sendable {
        let setup: ConnectionSetup
        let connection: PostgresConnection.ID
    }

    /// The connection the current task's keystore operation runs on, if any.
    @TaskLocal static var current: Current?
}
