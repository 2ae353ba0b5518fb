import Logging
import PostgresNIO
import SecureStorage
import Synchronization

/// The keystore's change feed over `LISTEN`/`NOTIFY`.
///
/// Every commit `NOTIFY`s in its own transaction with a payload naming the namespace, the
/// committing instance's random origin and the changed keys (or `*`, every key, when they do
/// not fit PostgreSQL's 8,000-byte payload limit); see
/// ``PostgresNamespace/notification(origin:keys:)``. PostgreSQL delivers notifications after
/// commit, in commit order, so the payload is all the feed needs: no change log is read.
/// This instance's own commits go to its subscribers at once, without the database, except
/// to a subscriber that excluded the batch's writer (a cache that already holds what it
/// wrote, which would otherwise re-read it: one more query per commit). While anyone is
/// subscribed, a listener holds one pooled connection with `LISTEN` and reports other
/// origins' keys of this namespace.
///
/// Each time the listener starts listening (the first time as well as after its connection
/// dropped: server restart, network failure) every subscriber gets ``KeystoreChange/all``,
/// since commits made while nobody listened are not replayed: they are reloaded. Reconnects
/// come with a growing pause (at most ``PostgresKeystore/Configuration/reconnectDelay``). A
/// stream whose buffer overflows also gets ``KeystoreChange/all``.
final class PostgresChangeFeed: Sendable {
    private struct Subscriber: Sendable {
        let continuation: AsyncStream<KeystoreChange>.Continuation
        /// This instance's commits made by batches of this writer are not delivered.
        let excludedWriter: UInt64?
    }

    private struct State: Sendable {
        var subscribers: [Int: Subscriber] = [:]
        var nextID = 0
        var listener: Task<Void, Never>?
        var closed = false
    }

    private let state: Mutex<State>
    private let client: PostgresClient
    private let namespace: PostgresNamespace
    private let origin: Int64
    /// What starts this instance's own notifications (the header is prefix-free).
    private let ownHeader: String
    private let configuration: PostgresKeystore.Configuration
    private let logger: Logger
    private let listening = Atomic<Bool>(false)

    init(
        client: PostgresClient, namespace: PostgresNamespace, origin: Int64,
        configuration: PostgresKeystore.Configuration, logger: Logger
    ) {
        self.client = client
        self.namespace = namespace
        self.origin = origin
        self.ownHeader = namespace.notificationHeader(origin: origin)
        self.configuration = configuration
        self.logger = logger
        self.state = Mutex(State())
    }

    /// Whether the listener currently holds a connection with `LISTEN` active (for tests).
    var isListening: Bool { listening.load(ordering: .acquiring) }

    func subscribe(excludingWriter writer: UInt64? = nil) -> AsyncStream<KeystoreChange> {
        let (stream, continuation) = AsyncStream<KeystoreChange>.makeStream(
            bufferingPolicy: .bufferingNewest(max(2, configuration.changeBufferSize)))
        let id = state.withLock { state -> Int? in
            guard !state.closed else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = Subscriber(continuation: continuation, excludedWriter: writer)
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

    /// Delivers this instance's own committed keys at once, to every subscriber but those
    /// excluding `writer` (the batch's; a group's batches have disjoint keys, so each key
    /// has one writer).
    func deliverLocal(_ keys: [String], writer: UInt64?) {
        guard !keys.isEmpty else { return }
        let subscribers = state.withLock { state in
            state.subscribers.values.compactMap { subscriber in
                writer != nil && subscriber.excludedWriter == writer ? nil : subscriber.continuation
            }
        }
        Self.yield(keys.map { .item($0) }, to: subscribers)
    }

    private func deliver(_ changes: [KeystoreChange]) {
        guard !changes.isEmpty else { return }
        let subscribers = state.withLock { $0.subscribers.values.map(\.continuation) }
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
            return (state.subscribers.values.map(\.continuation), state.listener)
        }
        listener?.cancel()
        for subscriber in subscribers { subscriber.finish() }
    }

    // MARK: Listener

    /// Listens until cancelled, reconnecting after every failure.
    private func listen() async {
        var pause: Duration = .milliseconds(50)
        var reconnecting = false
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: PostgresSchema.channel) { notifications in
                        self.listening.store(true, ordering: .releasing)
                        pause = .milliseconds(50)
                        // What was committed while nobody listened is reloaded, not replayed.
                        self.deliver([.all])
                        if reconnecting {
                            self.logger.debug("keystore change feed reconnected", metadata: ["broker.endpoint": "\(self.configuration.endpoint)"])
                        }
                        for try await notification in notifications {
                            self.received(notification.payload)
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
            reconnecting = true
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, configuration.reconnectDelay)
        }
    }

    /// Delivers another origin's keys of this namespace; ignores everything else.
    private func received(_ payload: String) {
        // Every own commit comes back here too; a byte comparison skips it without parsing
        // its keys into scalars.
        if payload.utf8.starts(with: ownHeader.utf8) { return }
        guard let (sender, keys) = namespace.parseNotification(payload), sender != origin else { return }
        guard let keys else { return deliver([.all]) }
        var seen: Set<String> = []
        deliver(keys.filter { seen.insert($0).inserted }.map { .item($0) })
    }
}
