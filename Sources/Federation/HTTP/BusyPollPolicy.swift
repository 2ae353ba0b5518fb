#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Decides, after each pass of the driver loop, whether to poll again at once instead of
/// sleeping in `curl_multi_poll`: a pure value type, so that the rule is tested apart
/// from the thread and the sockets. Used by ``CurlMultiLoop``.
///
/// Why: at light load a request's life is a chain of short gaps. The caller's task
/// builds the next request some tens of microseconds after the last response (a few
/// hundred when it commits the session to a durable store first), and a loopback or
/// same-zone server answers in about as long. Sleeping through each gap
/// costs a context switch and a wake-up both ways, and on a virtual machine whose idle
/// vCPUs halt, waking one again is the larger part of a request's latency (measured in
/// docs/performance.md, issue 12). Polling without sleeping for up to ``window`` after
/// the loop last made progress keeps the driver awake across such gaps; a caller
/// queueing work then finds it awake and sends no wake-up at all.
///
/// What it may cost is bounded:
/// - only with at most one transfer in flight: with more, the loop is busy anyway and
///   the CPU is better left to the callers and the server;
/// - at most ``window`` per wait, and only while waits of that kind (for work, for a
///   response) have recently ended within it. Each wait that outlasts the window costs
///   one credit; after ``maximumCredit`` such misses in a row the loop sleeps at once,
///   and a sleep shorter than the window (polling would have paid) earns a credit back.
///   A server that answers in milliseconds therefore costs ``maximumCredit`` windows,
///   not one per request.
package struct BusyPollPolicy: Sendable {
    /// How long the loop keeps polling after its last progress before it sleeps.
    ///
    /// 400 µs covers a loopback or same-zone answer and a durable commit between one
    /// federation and the next (an `fdatasync` takes 150–300 µs on the disks measured);
    /// with 100 µs the commit's gap was missed and durable federations at concurrency 1
    /// were 20 % slower (docs/performance.md, session 8).
    package static let window: UInt64 = 400_000  // nanoseconds
    /// Consecutive misses tolerated for one kind of wait.
    package static let maximumCredit = 4

    /// What the loop is waiting for while it polls.
    private enum Wait: Int {
        /// Nothing in flight: the next request.
        case work = 0
        /// One transfer in flight: its response.
        case response = 1
    }

    /// Misses still tolerated, per kind of wait (indexed by `Wait.rawValue`).
    private var credit = [Self.maximumCredit, Self.maximumCredit]
    /// The wait being polled through and when it began, or `nil` when not polling.
    private var polling: (wait: Wait, since: UInt64)?

    /// A policy with full credit for both kinds of wait.
    package init() {}

    /// Decides at the end of a pass, at monotonic time `now` (nanoseconds), with
    /// `inFlight` transfers in the multi handle, and `progressed` when the pass added or
    /// completed a transfer: `true` to poll again without sleeping.
    package mutating func keepPolling(now: UInt64, inFlight: Int, progressed: Bool) -> Bool {
        guard let wait = Self.wait(inFlight: inFlight) else {
            polling = nil
            return false
        }
        if progressed {
            if let current = polling { earn(current.wait) }
            guard credit[wait.rawValue] > 0 else {
                polling = nil
                return false
            }
            polling = (wait, now)
            return true
        }
        guard let current = polling else { return false }
        if current.wait == wait, now &- current.since < Self.window { return true }
        // The wait outlasted the window (or changed without progress: a cancellation).
        credit[current.wait.rawValue] = max(0, credit[current.wait.rawValue] - 1)
        polling = nil
        return false
    }

    /// Records a sleep of `duration` nanoseconds that began with `inFlight` transfers in
    /// flight. A sleep shorter than the window means polling would have paid.
    package mutating func slept(for duration: UInt64, inFlight: Int) {
        guard let wait = Self.wait(inFlight: inFlight), duration < Self.window else { return }
        earn(wait)
    }

    private mutating func earn(_ wait: Wait) {
        credit[wait.rawValue] = min(Self.maximumCredit, credit[wait.rawValue] + 1)
    }

    private static func wait(inFlight: Int) -> Wait? {
        switch inFlight {
        case 0: .work
        case 1: .response
        default: nil
        }
    }

    /// Monotonic time in nanoseconds (`CLOCK_MONOTONIC`, read through the vDSO: no system
    /// call, cheap enough for every pass of the loop).
    package static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}
