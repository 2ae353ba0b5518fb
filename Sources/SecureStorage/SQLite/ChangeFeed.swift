import Dispatch
import Logging
import Synchronization

/// The keystore's change feed: subscribers, own commits delivered at once, and a poller for
/// other processes' commits that runs only while someone is subscribed.
///
/// The poller checks `PRAGMA data_version` every interval on its own connection and, when the
/// database changed, reads the `changes` rows after its cursor that another origin wrote. A
/// cursor that fell behind the oldest row (the log was trimmed) or a failed poll gives
/// ``KeystoreChange/all``. The poller's cursor starts at the newest sequence this instance has
/// seen, so a subscriber may also receive changes committed shortly before it subscribed, but
/// never misses one committed after. Each subscriber buffers at most ``bufferSize`` changes; one
/// that falls further behind loses the oldest and receives ``KeystoreChange/all``.
///
/// While polls fail (the poller's connection cannot be opened or read), subscribers get
/// ``KeystoreChange/all`` at once and again every ``failingAllInterval``: they cannot be told
/// what changed, so they re-read what they hold rather than hear nothing. Once the database
/// file at the path is no longer the one the keystore opened (renamed over, or removed), the
/// poller delivers ``KeystoreChange/all`` once and stops (reads then fail, as commits do): the
/// file now at the path is one this keystore does not read.
final class ChangeFeed: Sendable {
    /// How many changes a subscriber's stream buffers before the oldest are dropped (and
    /// ``KeystoreChange/all`` is delivered instead).
    static let bufferSize = 4096

    private let subscribers = ChangeFanOut(bufferSize: ChangeFeed.bufferSize)
    /// The newest sequence this instance has seen, where the next poller starts. Raised
    /// before each delivery, so a poller started with a subscriber the delivery missed starts
    /// at or after that delivery's changes.
    private let knownSequence: Mutex<Int64>
    private let queue = DispatchQueue(label: "IdentityBroker.SQLiteKeystore.changes")
    private let path: String
    private let origin: Int64
    private let interval: Duration
    private let busyTimeout: Duration
    /// The database file the keystore opened; `nil`: not checked.
    private let watch: DatabaseFileWatch?
    private let logger: Logger?
    /// When the last warning of failing polls was logged (at most one per ``warningInterval``),
    /// and whether the replacement of the file was.
    private let warnings = Mutex<(failing: ContinuousClock.Instant?, replaced: Bool)>((nil, false))
    /// When the last `.all` for failing polls went out, across outages: polls that fail now
    /// and then (a busy database) give one a second at most, not one each.
    private let lastFailureAll = Mutex<ContinuousClock.Instant?>(nil)
    /// The least time between two warnings of failing polls (a poller whose polls fail now and
    /// then would otherwise log two lines each time).
    static let warningInterval: Duration = .seconds(300)
    /// Opens the poller's connection (tests make it fail).
    private let connect: @Sendable (String, Duration) throws(KeystoreError) -> SQLiteConnection

    /// How often subscribers get ``KeystoreChange/all`` while polls keep failing.
    static let failingAllInterval: Duration = .seconds(1)

    init(
        path: String, origin: Int64, interval: Duration, busyTimeout: Duration, knownSequence: Int64,
        watch: DatabaseFileWatch?, logger: Logger?,
        connect: @escaping @Sendable (String, Duration) throws(KeystoreError) -> SQLiteConnection = { (path, busyTimeout) throws(KeystoreError) in
            try SQLiteConnection(path: path, busyTimeout: busyTimeout)
        }
    ) {
        self.connect = connect
        self.path = path
        self.origin = origin
        self.interval = interval
        self.busyTimeout = busyTimeout
        self.knownSequence = Mutex(knownSequence)
        self.watch = watch
        self.logger = logger
    }

    func subscribe(excludingWriter writer: UInt64? = nil) -> AsyncStream<KeystoreChange> {
        subscribers.subscribe(excludingWriter: writer) {
            let timer = PollTimer(startPoller(from: knownSequence.withLock { $0 }))
            return { timer.cancel() }
        }
    }

    /// Delivers this instance's own committed keys (no polling) and advances the sequence the
    /// next poller starts from.
    func deliverLocal(_ changes: [CommittedChange], lastSequence: Int64?) {
        if let lastSequence { advance(to: lastSequence) }
        subscribers.deliver(changes.map { (change: .item($0.key), writer: $0.writer) })
    }

    private func deliver(_ changes: [KeystoreChange], sequence: Int64) {
        advance(to: sequence)
        subscribers.deliver(changes)
    }

    private func advance(to sequence: Int64) {
        knownSequence.withLock { $0 = max($0, sequence) }
    }

    /// Ends every stream and stops the poller (its connection closes on its queue).
    func close() {
        subscribers.close()
        queue.sync {}
    }

    // MARK: Poller

    /// The poller's timer, which the fan-out stops from any thread: cancelling a dispatch
    /// source is thread-safe, which is why the unchecked Sendable is sound.
    private final class PollTimer: @unchecked Sendable {
        private let timer: any DispatchSourceTimer
        init(_ timer: any DispatchSourceTimer) { self.timer = timer }
        func cancel() { timer.cancel() }
    }

    /// Queue-confined poller state.
    private final class Poller: @unchecked Sendable {
        var connection: SQLiteConnection?
        var cursor: Int64
        var dataVersion: Int64?
        var lostTrack = false
        /// When polls started failing, and when the last `.all` for it went out.
        var failing: (since: ContinuousClock.Instant, lastAll: ContinuousClock.Instant)?
        var replaced = false
        init(cursor: Int64) { self.cursor = cursor }
    }

    private func startPoller(from cursor: Int64) -> any DispatchSourceTimer {
        let poller = Poller(cursor: cursor)
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let nanoseconds = interval.wholeNanoseconds
        timer.schedule(deadline: .now(), repeating: .nanoseconds(Int(max(1_000_000, nanoseconds))))
        timer.setEventHandler { [weak self] in self?.poll(poller) }
        timer.setCancelHandler {
            poller.connection?.close()
            poller.connection = nil
        }
        timer.resume()
        return timer
    }

    private func poll(_ poller: Poller) {
        if poller.replaced || foundReplaced(poller) { return }
        do {
            let connection: SQLiteConnection
            if let open = poller.connection {
                connection = open
            } else {
                connection = try connect(path, busyTimeout)
                poller.connection = connection
            }
            let version = try connection.withStatement("PRAGMA data_version") { statement throws(KeystoreError) -> Int64 in
                _ = try statement.step()
                return statement.int64(0)
            }
            if version == poller.dataVersion && !poller.lostTrack { return }
            poller.dataVersion = version
            let (changes, newest) = try connection.readTransaction { () throws(KeystoreError) -> ([KeystoreChange], Int64) in
                let (oldest, newest) = try connection.withStatement(StoreSchema.changeBounds) { statement throws(KeystoreError) -> (Int64?, Int64?) in
                    _ = try statement.step()
                    return (statement.isNull(0) ? nil : statement.int64(0), statement.isNull(1) ? nil : statement.int64(1))
                }
                let cursor = poller.cursor
                // Rows after the cursor were trimmed, or the log restarted below it. Sequence
                // numbers come from a file a group member can write: one at Int64.max leaves
                // no room above it (SQLite then picks rowids at random), so every change after
                // it is reported as `.all` rather than trapping on `cursor + 1`.
                let (next, exhausted) = cursor.addingReportingOverflow(1)
                if poller.lostTrack || exhausted || (oldest.map { $0 > next } ?? false) || (newest.map { $0 < cursor } ?? false) {
                    return ([.all], newest ?? 0)
                }
                let changes = try connection.withStatement(StoreSchema.changesSince) { statement throws(KeystoreError) -> [KeystoreChange] in
                    try statement.bind(1, int64: cursor)
                    try statement.bind(2, int64: origin)
                    var keys: [String] = []
                    var seen: Set<ItemKey.Exact> = []
                    while try statement.step() {
                        // A key no item can have: forged, so every key may have changed.
                        if statement.isNull(1) { return [.all] }
                        let key = statement.text(1)
                        if seen.insert(ItemKey.Exact(key)).inserted { keys.append(key) }
                        // More than a subscriber buffers, which would then get `.all` anyway (a
                        // bulk write, or a member flooding a shared group's log): stop reading
                        // rather than hold a list that grows with the log.
                        if keys.count > Self.bufferSize { return [.all] }
                    }
                    return keys.map { .item($0) }
                }
                return (changes, newest ?? cursor)
            }
            poller.cursor = newest
            poller.lostTrack = false
            if let failing = poller.failing {
                logger?.debug("the change feed reads the database again", metadata: [
                    "broker.path": "\(path)", "broker.failedForMs": "\((ContinuousClock.now - failing.since).wholeMilliseconds)",
                ])
                poller.failing = nil
            }
            if !changes.isEmpty { deliver(changes, sequence: newest) }
        } catch {
            // The next successful poll cannot know what it missed.
            poller.lostTrack = true
            poller.connection?.close()
            poller.connection = nil
            pollFailed(poller, error)
        }
    }

    /// Subscribers cannot be told what changed while polls fail: `.all` now, and again every
    /// ``failingAllInterval`` while it lasts, so they re-read what they hold.
    private func pollFailed(_ poller: Poller, _ error: KeystoreError) {
        let now = ContinuousClock.now
        if let failing = poller.failing {
            guard now - failing.lastAll >= Self.failingAllInterval else { return }
            poller.failing = (failing.since, now)
        } else {
            defer { poller.failing = (now, now) }
            let metadata: Logger.Metadata = ["broker.path": "\(path)", "broker.error": "\(error.code)"]
            let warn = warnings.withLock { warnings in
                guard warnings.failing.map({ now - $0 >= Self.warningInterval }) ?? true else { return false }
                warnings.failing = now
                return true
            }
            if warn {
                logger?.warning("the change feed cannot read the database; every item may have changed until it can", metadata: metadata)
            } else {
                logger?.debug("the change feed cannot read the database", metadata: metadata)
            }
        }
        let due = lastFailureAll.withLock { last in
            guard last.map({ now - $0 >= Self.failingAllInterval }) ?? true else { return false }
            last = now
            return true
        }
        if due { subscribers.deliver([.all]) }
    }

    /// Whether the database file at the path is no longer the one the keystore opened; if so,
    /// this poller says so once (`.all`), and stops.
    private func foundReplaced(_ poller: Poller) -> Bool {
        guard let watch, watch.lookNow() else { return false }
        poller.replaced = true
        poller.connection?.close()
        poller.connection = nil
        if warnings.withLock({ warnings in defer { warnings.replaced = true }; return !warnings.replaced }) {
            logger?.warning(
                "the database file was replaced or removed while the keystore had it open; reads and commits fail until it is opened again",
                metadata: ["broker.path": "\(path)"])
        }
        subscribers.deliver([.all])
        return true
    }
}
