import Logging
import PostgresNIO
import SecureStorage
import Synchronization

/// The keystore's change feed over `LISTEN`/`NOTIFY`.
///
/// Every commit appends one row per changed key to `identity_broker_changes` (tagged with the
/// committing instance's random origin) and `NOTIFY`s in the same transaction. This
/// instance's own commits go to its subscribers at once, without the database. While anyone
/// is subscribed, a listener holds one pooled connection with `LISTEN`; on each notification
/// for this namespace it reads the rows after its cursor that another origin wrote.
///
/// Commits of one namespace are ordered by an advisory lock, so sequence numbers within a
/// namespace follow commit order and a cursor never skips a row committed late.
///
/// When the listener's connection drops (server restart, network failure) it reconnects with
/// a growing pause (at most ``PostgresKeystore/Configuration/reconnectDelay``) and, once it
/// listens again, gives every subscriber ``KeystoreChange/all``: what happened meanwhile is
/// reloaded, not replayed. A stream whose buffer overflows also gets ``KeystoreChange/all``.
final class PostgresChangeFeed: Sendable {
    private struct State: Sendable {
        var subscribers: [Int: AsyncStream<KeystoreChange>.Continuation] = [:]
        var nextID = 0
        var listener: Task<Void, Never>?
        var knownSequence: Int64
        var closed = false
    }

    private let state: Mutex<State>
    private let client: PostgresClient
    private let namespace: PostgresNamespace
    private let origin: Int64
    private let configuration: PostgresKeystore.Configuration
    private let logger: Logger
    private let listening = Atomic<Bool>(false)

    init(
        client: PostgresClient, namespace: PostgresNamespace, origin: Int64, knownSequence: Int64,
        configuration: PostgresKeystore.Configuration, logger: Logger
    ) {
        self.client = client
        self.namespace = namespace
        self.origin = origin
        self.configuration = configuration
        self.logger = logger
        self.state = Mutex(State(knownSequence: knownSequence))
    }

    /// Whether the listener currently holds a connection with `LISTEN` active (for tests).
    var isListening: Bool { listening.load(ordering: .acquiring) }

    func subscribe() -> AsyncStream<KeystoreChange> {
        let (stream, continuation) = AsyncStream<KeystoreChange>.makeStream(
            bufferingPolicy: .bufferingNewest(max(2, configuration.changeBufferSize)))
        let id = state.withLock { state -> Int? in
            guard !state.closed else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = continuation
            if state.listener == nil {
                state.listener = Task { [weak self] in await self?.listen() }
            }
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
        let listener = state.withLock { state -> Task<Void, Never>? in
            state.subscribers[id] = nil
            guard state.subscribers.isEmpty else { return nil }
            defer { state.listener = nil }
            return state.listener
        }
        listener?.cancel()
    }

    /// Delivers this instance's own committed keys at once and advances the cursor a new
    /// listener starts from.
    func deliverLocal(_ keys: [String], lastSequence: Int64?) {
        let subscribers = state.withLock { state -> [AsyncStream<KeystoreChange>.Continuation] in
            if let lastSequence { state.knownSequence = max(state.knownSequence, lastSequence) }
            return Array(state.subscribers.values)
        }
        Self.yield(keys.map { .item($0) }, to: subscribers)
    }

    private func deliver(_ changes: [KeystoreChange], sequence: Int64?) {
        let subscribers = state.withLock { state -> [AsyncStream<KeystoreChange>.Continuation] in
            if let sequence { state.knownSequence = max(state.knownSequence, sequence) }
            return Array(state.subscribers.values)
        }
        Self.yield(changes, to: subscribers)
    }

    /// Yields each change; a full buffer (the oldest element dropped) is followed by `.all`,
    /// which the newest-keeping buffer always holds.
    private static func yield(_ changes: [KeystoreChange], to subscribers: [AsyncStream<KeystoreChange>.Continuation]) {
        for subscriber in subscribers {
            var dropped = false
            for change in changes {
                if case .dropped = subscriber.yield(change) { dropped = true }
            }
            if dropped { subscriber.yield(.all) }
        }
    }

    /// Ends every stream and stops the listener.
    func close() {
        let (subscribers, listener) = state.withLock { state -> ([AsyncStream<KeystoreChange>.Continuation], Task<Void, Never>?) in
            state.closed = true
            defer {
                state.subscribers.removeAll()
                state.listener = nil
            }
            return (Array(state.subscribers.values), state.listener)
        }
        listener?.cancel()
        for subscriber in subscribers { subscriber.finish() }
    }

    // MARK: Listener

    /// Listens until cancelled, reconnecting after every failure.
    ///
    /// The listener's cursor is its own: it advances only over rows the listener read (its
    /// own origin's included), never over this instance's deliveries, which could otherwise
    /// jump past another origin's row committed just before.
    private func listen() async {
        var cursor = state.withLock { $0.knownSequence }
        var lostTrack = false
        var pause: Duration = .milliseconds(50)
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: PostgresSchema.channel) { notifications in
                        self.listening.store(true, ordering: .releasing)
                        pause = .milliseconds(50)
                        if lostTrack {
                            // What changed while disconnected is reloaded, not replayed.
                            cursor = try await PostgresSchema.newestSequence(self.namespace, on: connection, logger: self.logger)
                            lostTrack = false
                            self.deliver([.all], sequence: cursor)
                            self.logger.debug("keystore change feed reconnected", metadata: ["broker.endpoint": "\(self.configuration.endpoint)"])
                        }
                        cursor = try await self.catchUp(from: cursor, on: connection)
                        let payload = self.namespace.notificationPayload
                        for try await notification in notifications {
                            guard notification.payload == payload else { continue }
                            cursor = try await self.catchUp(from: cursor, on: connection)
                        }
                    }
                }
            } catch {
                logger.debug("keystore change feed lost its connection", metadata: [
                    "broker.endpoint": "\(configuration.endpoint)",
                    "broker.error": "\(KeystoreError.postgres(error, operation: "listening", configuration: configuration).reason)",
                ])
            }
            listening.store(false, ordering: .releasing)
            guard !Task.isCancelled else { return }
            lostTrack = true
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, configuration.reconnectDelay)
        }
    }

    /// Reads the rows after `cursor`, delivers other origins' keys, and returns the new cursor.
    private func catchUp(from cursor: Int64, on connection: PostgresConnection) async throws -> Int64 {
        let rows = try await connection.query("""
            SELECT seq, key, origin FROM identity_broker_changes
            WHERE service = \(namespace.service) AND access_group = \(namespace.groupColumn) AND seq > \(cursor)
            ORDER BY seq
            """, logger: logger).collect()
        guard !rows.isEmpty else { return cursor }
        var newest = cursor
        var keys: [String] = []
        var seen: Set<String> = []
        for row in rows {
            let (seq, key, rowOrigin) = try row.decode((Int64, String, Int64).self)
            newest = max(newest, seq)
            if rowOrigin != origin && seen.insert(key).inserted { keys.append(key) }
        }
        deliver(keys.map { .item($0) }, sequence: newest)
        return newest
    }
}
