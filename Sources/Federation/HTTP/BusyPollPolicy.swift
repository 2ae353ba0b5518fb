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
///   response) have mostly ended within it. A wait runs from one pass that made progress to
///   the next; every wait, polled through or slept through alike, is scored once: a hit when
///   it ended within the window, a miss when it outlasted it. The loop polls only while the
///   recent hit rate, a moving average, is at least ``pollingHitRate``. A server that answers
///   in milliseconds turns polling for responses off after three misses; a pattern of one
///   short and one long gap (a request, then a commit to a database that needs the CPU the
///   poll would hold) turns it off too, where counting consecutive misses would have kept
///   polling through every long gap;
/// - by one driver at a time in the process (``CurlMultiLoop`` holds a process-wide token
///   while it polls), so many clients, each with its own transport, cannot hold many CPUs.
package struct BusyPollPolicy: Sendable {
    /// How long the loop keeps polling after its last progress before it sleeps.
    ///
    /// 400 µs covers a loopback or same-zone answer and a durable commit between one
    /// federation and the next (an `fdatasync` takes 150–300 µs on the disks measured);
    /// with 100 µs the commit's gap was missed and durable federations at concurrency 1
    /// were 20 % slower (docs/performance.md, §3b).
    package static let window = Duration.microseconds(400)
    /// The hit rate at or above which the loop polls, out of ``fullHitRate``.
    package static let pollingHitRate = 768
    /// A hit rate of 100 %.
    package static let fullHitRate = 1024

    /// What the loop is waiting for.
    private enum Wait: Int {
        /// Nothing in flight: the next request.
        case work = 0
        /// One transfer in flight: its response.
        case response = 1
    }

    /// Each kind of wait's recent hit rate, out of `fullHitRate` (indexed by
    /// `Wait.rawValue`): each outcome moves it an eighth of the way to 0 or to full.
    private var hitRate = [Self.fullHitRate, Self.fullHitRate]
    /// The wait under way since the last progress, and when it began.
    private var current: (kind: Wait, since: ContinuousClock.Instant)?

    /// A policy that polls through both kinds of wait until misses say otherwise.
    package init() {}

    /// Decides at the end of every pass of the loop, polled or woken from a sleep, at `now`,
    /// with `inFlight` transfers in the multi handle, and `progressed` when the pass added or
    /// completed a transfer: `true` to poll again without sleeping.
    ///
    /// A wait is scored when it ends, that is at the next pass with progress; one that
    /// outlasted the window is a miss however long it went on.
    package mutating func keepPolling(now: ContinuousClock.Instant, inFlight: Int, progressed: Bool) -> Bool {
        if progressed {
            if let ended = current {
                score(ended.kind, hit: Self.isWithinWindow(from: ended.since, to: now))
            }
            current = Self.wait(inFlight: inFlight).map { (kind: $0, since: now) }
            return current.map(isPolled) ?? false
        }
        guard let wait = current, Self.wait(inFlight: inFlight) == wait.kind else {
            // Two or more in flight, or a cancellation changed the wait: not scored.
            current = nil
            return false
        }
        return isPolled(wait) && Self.isWithinWindow(from: wait.since, to: now)
    }

    /// Whether the loop polls through `wait`: its kind's hit rate, which changes only when a
    /// wait ends, was high enough when it began.
    private func isPolled(_ wait: (kind: Wait, since: ContinuousClock.Instant)) -> Bool {
        hitRate[wait.kind.rawValue] >= Self.pollingHitRate
    }

    /// Whether `now` is within the window after `start`; a clock that stepped back is not.
    private static func isWithinWindow(from start: ContinuousClock.Instant, to now: ContinuousClock.Instant) -> Bool {
        let elapsed = start.duration(to: now)
        return elapsed >= .zero && elapsed < window
    }

    private mutating func score(_ kind: Wait, hit: Bool) {
        let rate = hitRate[kind.rawValue]
        hitRate[kind.rawValue] = hit ? rate + (Self.fullHitRate - rate) / 8 : rate - rate / 8
    }

    private static func wait(inFlight: Int) -> Wait? {
        switch inFlight {
        case 0: .work
        case 1: .response
        default: nil
        }
    }
}
