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
///   response) have mostly ended within it. Every wait is scored, polled through or slept
///   through alike: ended within the window (a hit) or not (a miss). The loop polls only
///   while the recent hit rate, a moving average, is at least ``pollingHitRate``. A server
///   that answers in milliseconds turns polling for responses off after three misses; a
///   pattern of one short and one long gap (a request, then a commit to a database that
///   needs the CPU the poll would hold) turns it off too, where counting consecutive misses
///   would have kept polling through every long gap.
package struct BusyPollPolicy: Sendable {
    /// How long the loop keeps polling after its last progress before it sleeps.
    ///
    /// 400 µs covers a loopback or same-zone answer and a durable commit between one
    /// federation and the next (an `fdatasync` takes 150–300 µs on the disks measured);
    /// with 100 µs the commit's gap was missed and durable federations at concurrency 1
    /// were 20 % slower (docs/performance.md, session 8).
    package static let window: UInt64 = 400_000  // nanoseconds
    /// The hit rate at or above which the loop polls, out of ``fullHitRate``.
    package static let pollingHitRate = 768
    /// A hit rate of 100 %.
    package static let fullHitRate = 1024

    /// What the loop is waiting for while it polls.
    private enum Wait: Int {
        /// Nothing in flight: the next request.
        case work = 0
        /// One transfer in flight: its response.
        case response = 1
    }

    /// Each kind of wait's recent hit rate, out of `fullHitRate` (indexed by
    /// `Wait.rawValue`): each outcome moves it an eighth of the way to 0 or to full.
    private var hitRate = [Self.fullHitRate, Self.fullHitRate]
    /// The wait being polled through and when it began, or `nil` when not polling.
    private var polling: (wait: Wait, since: UInt64)?
    /// Set when a poll's miss has been scored, so the sleep that follows it (the same
    /// wait) is not scored again.
    private var sleepAlreadyScored = false

    /// A policy that polls through both kinds of wait until misses say otherwise.
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
            if let current = polling { score(current.wait, hit: true) }
            guard hitRate[wait.rawValue] >= Self.pollingHitRate else {
                polling = nil
                return false
            }
            polling = (wait, now)
            return true
        }
        guard let current = polling else { return false }
        if current.wait == wait, now &- current.since < Self.window { return true }
        // The wait outlasted the window (or changed without progress: a cancellation).
        score(current.wait, hit: false)
        sleepAlreadyScored = true
        polling = nil
        return false
    }

    /// Records a sleep of `duration` nanoseconds that began with `inFlight` transfers in
    /// flight: a sleep shorter than the window is a hit (polling would have paid), a longer
    /// one a miss.
    package mutating func slept(for duration: UInt64, inFlight: Int) {
        defer { sleepAlreadyScored = false }
        guard !sleepAlreadyScored, let wait = Self.wait(inFlight: inFlight) else { return }
        score(wait, hit: duration < Self.window)
    }

    private mutating func score(_ wait: Wait, hit: Bool) {
        let rate = hitRate[wait.rawValue]
        hitRate[wait.rawValue] = hit ? rate + (Self.fullHitRate - rate) / 8 : rate - rate / 8
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
