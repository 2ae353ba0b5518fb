import Dispatch
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
final class ChangeFeed: Sendable {
    private struct Subscriber: Sendable {
        let continuation: AsyncStream<KeystoreChange>.Continuation
        /// This instance's commits made solely by batches of this writer are not delivered.
        let excludedWriter: UInt64?
    }

    private struct State: @unchecked Sendable {
        // The timer is only touched under the lock; that is why the unchecked Sendable is sound.
        var subscribers: [Int: Subscriber] = [:]
        var nextID = 0
        var timer: (any DispatchSourceTimer)?
        var knownSequence: Int64 = 0
        var closed = false
    }

    /// How many changes a subscriber's stream buffers before the oldest are dropped (and
    /// ``KeystoreChange/all`` is delivered instead).
    static let bufferSize = 4096

    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "IdentityBroker.SQLiteKeystore.changes")
    private let path: String
    private let origin: Int64
    private let interval: Duration
    private let busyTimeout: Duration

    init(path: String, origin: Int64, interval: Duration, busyTimeout: Duration, knownSequence: Int64) {
        self.path = path
        self.origin = origin
        self.interval = interval
        self.busyTimeout = busyTimeout
        state.withLock { $0.knownSequence = knownSequence }
    }

    func subscribe(excludingWriter writer: UInt64? = nil) -> AsyncStream<KeystoreChange> {
        let (stream, continuation) = AsyncStream<KeystoreChange>.makeStream(bufferingPolicy: .bufferingNewest(Self.bufferSize))
        let id = state.withLock { state -> Int? in
            guard !state.closed else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = Subscriber(continuation: continuation, excludedWriter: writer)
            if state.timer == nil { state.timer = startPoller(from: state.knownSequence) }
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return stream
    }

    private func unsubscribe(_ id: Int) {
        let timer = state.withLock { state -> (any DispatchSourceTimer)? in
            state.subscribers[id] = nil
            guard state.subscribers.isEmpty else { return nil }
            defer { state.timer = nil }
            return state.timer
        }
        timer?.cancel()
    }

    /// Delivers this instance's own committed keys (no polling) and advances the sequence the
    /// next poller starts from.
    func deliverLocal(_ changes: [CommittedChange], lastSequence: Int64?) {
        let subscribers = state.withLock { state -> [Subscriber] in
            if let lastSequence { state.knownSequence = max(state.knownSequence, lastSequence) }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers {
            for change in changes {
                if let excluded = subscriber.excludedWriter, excluded == change.writer { continue }
                Self.yield(.item(change.key), to: subscriber.continuation)
            }
        }
    }

    private func deliver(_ changes: [KeystoreChange], sequence: Int64) {
        let subscribers = state.withLock { state -> [Subscriber] in
            state.knownSequence = max(state.knownSequence, sequence)
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers {
            for change in changes { Self.yield(change, to: subscriber.continuation) }
        }
    }

    /// Yields `change`. A subscriber that does not keep up has a full buffer, whose oldest
    /// change `yield` then drops: so that no change is lost silently, it is also told to reload
    /// everything with ``KeystoreChange/all``.
    private static func yield(_ change: KeystoreChange, to subscriber: AsyncStream<KeystoreChange>.Continuation) {
        if case .dropped = subscriber.yield(change), change != .all {
            subscriber.yield(.all)
        }
    }

    /// Ends every stream and stops the poller (its connection closes on its queue).
    func close() {
        let (subscribers, timer) = state.withLock { state -> ([Subscriber], (any DispatchSourceTimer)?) in
            state.closed = true
            defer {
                state.subscribers.removeAll()
                state.timer = nil
            }
            return (Array(state.subscribers.values), state.timer)
        }
        timer?.cancel()
        for subscriber in subscribers { subscriber.continuation.finish() }
        queue.sync {}
    }

    // MARK: Poller

    /// Queue-confined poller state.
    private final class Poller: @unchecked Sendable {
        var connection: SQLiteConnection?
        var cursor: Int64
        var dataVersion: Int64?
        var lostTrack = false
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
        do {
            let connection: SQLiteConnection
            if let open = poller.connection {
                connection = open
            } else {
                connection = try SQLiteConnection(path: path, busyTimeout: busyTimeout)
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
                // Rows after the cursor were trimmed, or the log restarted below it.
                if poller.lostTrack || (oldest.map { $0 > cursor + 1 } ?? false) || (newest.map { $0 < cursor } ?? false) {
                    return ([.all], newest ?? 0)
                }
                let changes = try connection.withStatement(StoreSchema.changesSince) { statement throws(KeystoreError) -> [KeystoreChange] in
                    try statement.bind(1, int64: cursor)
                    try statement.bind(2, int64: origin)
                    var keys: [String] = []
                    var seen: Set<String> = []
                    while try statement.step() {
                        let key = statement.text(1)
                        if seen.insert(key).inserted { keys.append(key) }
                    }
                    return keys.map { .item($0) }
                }
                return (changes, newest ?? cursor)
            }
            poller.cursor = newest
            poller.lostTrack = false
            if !changes.isEmpty { deliver(changes, sequence: newest) }
        } catch {
            // The next successful poll cannot know what it missed.
            poller.lostTrack = true
            poller.connection?.close()
            poller.connection = nil
        }
    }
}
