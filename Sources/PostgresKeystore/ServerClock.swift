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
/// reads the server's clock when it is set up (``ConnectionSetup``), and later instants are
/// that reading plus the time elapsed on this host's monotonic clock, counted from before
/// the reading was asked for (so the estimate is never behind the server by more than the
/// drift; ahead by at most the round trip). A server clock stepped forward since the reading
/// refuses commits that are on time: the refusal comes back at once, the connection reads
/// the clock again and the commit runs again (``PostgresKeystore/applyDistinct(_:namespace:origin:call:allowance:on:logger:)``).
/// One stepped back loosens the fence by the step.
struct ServerClock: Sendable {
    /// The server's `clock_timestamp()`, in microseconds since 1970.
    let microseconds: Int64
    /// This host's clock just before the statement that read it was sent.
    let askedAt: ContinuousClock.Instant

    /// The latest the server's clock can read at `instant`, in microseconds since 1970.
    func latest(at instant: ContinuousClock.Instant) -> Int64 {
        microseconds.addingReportingOverflow(Self.microseconds(instant - askedAt)).partialValue
    }

    /// The fence for a statement sent at `instant` that must start within `allowance`.
    func fence(sentAt instant: ContinuousClock.Instant, allowance: Duration) -> Int64 {
        latest(at: instant).addingReportingOverflow(Self.microseconds(allowance)).partialValue
    }

    /// The server's clock in microseconds since 1970, as SQL (`date_part` is a double on every
    /// supported version; microseconds of today's dates fit its 53 bits).
    static let sql = "(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000000)::int8"

    /// Reads the server's clock on `connection`.
    static func read(on connection: PostgresConnection, logger: Logger) async throws -> ServerClock {
        let askedAt = ContinuousClock.now
        let rows = try await connection.queryUnlessClosed(PostgresQuery(unsafeSQL: "SELECT \(sql)"), logger: logger).rows
        guard let microseconds = try rows.first?.decode(Int64.self) else {
            throw KeystoreError(.io, "the server's clock could not be read")
        }
        return ServerClock(microseconds: microseconds, askedAt: askedAt)
    }

    /// Whole microseconds of `duration`, saturating.
    static func microseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        let whole = seconds.multipliedReportingOverflow(by: 1_000_000)
        guard !whole.overflow else { return seconds < 0 ? .min : .max }
        return whole.partialValue.addingReportingOverflow(attoseconds / 1_000_000_000_000).partialValue
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
