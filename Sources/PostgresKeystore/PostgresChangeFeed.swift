import Logging
import PostgresNIO
import SecureStorage
import Synchronization

/// The keystore's change feed over `LISTEN`/`NOTIFY`.
///
/// Every commit `NOTIFY`s in its own transaction with a payload naming the namespace, the
/// committing instance's random origin and the changed keys, in several notifications when
/// they do not fit PostgreSQL's 8,000-byte payload limit (`*`, every key, only where a batch
/// that names a key twice overflows it); see
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
/// stream whose buffer overflows also gets ``KeystoreChange/all``. A listening connection
/// that stops answering (``PostgresKeystore/Configuration/changeFeedHeartbeat``) is closed
/// and replaced the same way.
final class PostgresChangeFeed: Sendable {
    private let subscribers: ChangeFanOut
    private let pool: PostgresPool
    private let namespace: PostgresNamespace
    private let origin: Int64
    /// What starts this instance's own notifications (the header is prefix-free).
    private let ownHeader: String
    private let configuration: PostgresKeystore.Configuration
    private let logger: Logger
    private let listening = Atomic<Bool>(false)
    /// Until when this instance's own notifications are delivered as well (see
    /// ``commitMayHaveApplied(_:window:)``).
    private let ownNotificationsUntil = Mutex<ContinuousClock.Instant?>(nil)

    init(
        pool: PostgresPool, namespace: PostgresNamespace, origin: Int64,
        configuration: PostgresKeystore.Configuration, logger: Logger
    ) {
        self.pool = pool
        self.namespace = namespace
        self.origin = origin
        self.ownHeader = namespace.notificationHeader(origin: origin)
        self.configuration = configuration
        self.logger = logger
        self.subscribers = ChangeFanOut(bufferSize: max(2, configuration.changeBufferSize))
    }

    /// Whether the listener currently holds a connection with `LISTEN` active (for tests).
    var isListening: Bool { listening.load(ordering: .acquiring) }

    func subscribe(excludingWriter writer: UInt64? = nil) -> AsyncStream<KeystoreChange> {
        subscribers.subscribe(excludingWriter: writer) {
            let listener = Task { [weak self] in await self?.listen() }
            return { listener.cancel() }
        }
    }

    /// Delivers this instance's own committed keys at once, to every subscriber but those
    /// excluding `writer` (the batch's; a group's batches have disjoint keys, so each key
    /// has one writer).
    func deliverLocal(_ keys: [String], writer: UInt64?) {
        subscribers.deliver(keys.map { (change: KeystoreChange.item($0), writer: writer) })
    }

    /// A commit of `keys` failed in a way that may have applied it, now or later (its answer
    /// lost, a timeout while it committed, a statement still queued on the server): every
    /// subscriber, the writer's too, is told the keys changed, and for `window` this
    /// instance's own notifications are delivered like another's, so a commit that lands
    /// late is heard of. Otherwise the feed skips them, and a client sharing this keystore
    /// with the writer would never learn of such a commit.
    func commitMayHaveApplied(_ keys: [String], window: Duration) {
        let until = ContinuousClock.now.advanced(by: window)
        ownNotificationsUntil.withLock { current in
            if current.map({ $0 < until }) ?? true { current = until }
        }
        var seen: Set<String> = []
        subscribers.deliver(keys.filter { seen.insert($0).inserted }.map { (change: KeystoreChange.item($0), writer: nil) })
    }

    /// Whether this instance's own notifications are delivered now.
    private var takesOwnNotifications: Bool {
        ownNotificationsUntil.withLock { until in
            guard let end = until else { return false }
            if end > .now { return true }
            until = nil
            return false
        }
    }

    /// Ends every stream and stops the listener.
    func close() {
        subscribers.close()
    }

    // MARK: Listener

    /// Listens until cancelled, reconnecting after every failure.
    private func listen() async {
        var pause: Duration = .milliseconds(50)
        var reconnecting = false
        while !Task.isCancelled {
            var listeningSince: ContinuousClock.Instant?
            let generation = pool.current
            // A connection that does not come within the operation timeout (a pool still backing
            // off after the server came back) is trouble, as for a call: waiting for one has no
            // deadline here, and the pool gives up on its own only after a minute.
            let leased = Flag()
            let overdue = Task { [pool, configuration] in
                try? await Task.sleep(for: configuration.operationTimeout)
                if !Task.isCancelled && !leased.isSet { pool.reportTrouble(on: generation) }
            }
            defer { overdue.cancel() }
            do {
                // Not a holding call: a replaced pool need not wait for the listener to end.
                try await pool.withConnection(on: generation, holding: false) { connection in
                    leased.set()
                    // Started before LISTEN, which a silent connection would never acknowledge.
                    var heartbeat: Task<Void, Never>?
                    if let interval = self.configuration.changeFeedHeartbeat, interval > .zero {
                        heartbeat = Task { await self.closeWhenSilent(connection, every: interval) }
                    }
                    defer { heartbeat?.cancel() }
                    // Each notification is handled on the connection's event loop as it is
                    // decoded, not handed to a task through postgres-nio's notification
                    // sequence, which buffers without bound: anyone who may NOTIFY could send
                    // faster than a task drains it and run this process out of memory. Here a
                    // slow feed slows the socket's reads instead, and the server holds what
                    // waits. It also spares a thread hand-off per notification, this
                    // instance's own included.
                    let listener = connection.addListener(channel: PostgresSchema.channel) { _, notification in
                        self.received(notification.payload)
                    }
                    // Detaching the last listener of the channel sends UNLISTEN.
                    defer { listener.stop() }
                    // Adding the listener sent LISTEN; a statement written after it is
                    // answered after it, so LISTEN is in force once this (a second LISTEN,
                    // which changes nothing) returns.
                    try await connection.query(PostgresQuery(unsafeSQL: #"LISTEN "\#(PostgresSchema.channel)""#), logger: self.logger)
                    self.listening.store(true, ordering: .releasing)
                    listeningSince = .now
                    // What was committed while nobody listened is reloaded, not replayed.
                    self.subscribers.deliver([.all])
                    if reconnecting {
                        self.logger.debug("keystore change feed reconnected", metadata: ["broker.endpoint": "\(self.configuration.endpoint)"])
                    }
                    try await Self.untilClosed(connection)
                }
            } catch {
                // Lost or never had (the server is away): the pool watches for its return.
                if !Task.isCancelled { pool.reportTrouble(on: generation) }
                logger.debug("keystore change feed lost its connection", metadata: [
                    "broker.endpoint": "\(configuration.endpoint)",
                    "broker.error": "\(KeystoreError.postgres(error, operation: "listening", configuration: configuration).reason)",
                ])
            }
            listening.store(false, ordering: .releasing)
            guard !Task.isCancelled else { return }
            reconnecting = true
            // Only a connection that lasted starts the pauses afresh: one ended again and again
            // just after LISTEN (a proxy, a session timeout) would otherwise make every client
            // reload all it holds 20 times a second, once per `.all`.
            if let listeningSince, ContinuousClock.now - listeningSince >= configuration.reconnectDelay {
                pause = .milliseconds(50)
            }
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, configuration.reconnectDelay)
        }
    }

    /// Returns when the task is cancelled; throws ``ListeningConnectionClosed`` when
    /// `connection` closes first.
    private static func untilClosed(_ connection: PostgresConnection) async throws {
        let (ended, ending) = AsyncStream.makeStream(of: Void.self)
        connection.closeFuture.whenComplete { _ in ending.finish() }
        // Ends when the stream finishes or the task is cancelled.
        for await _ in ended {}
        guard connection.isClosed else { return }
        throw ListeningConnectionClosed()
    }

    /// The listening connection closed under the feed (the server went away, the network
    /// dropped, or the heartbeat closed a silent one).
    struct ListeningConnectionClosed: Error, CustomStringConvertible {
        var description: String { "the listening connection closed" }
    }

    /// Checks every `interval` that `connection` answers within twice the operation timeout, and
    /// closes it when it does not (which ends the listening loop with an error, so the feed
    /// reconnects). Returns when cancelled or once it closed the connection.
    private func closeWhenSilent(_ connection: PostgresConnection, every interval: Duration) async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            // The query cannot be cancelled, so the timeout closes the connection itself,
            // which ends the query too; the group then finishes.
            let answered = await withTaskGroup(of: Bool.self) { group in
                group.addTask { [logger] in (try? await connection.runUnlessClosed("SELECT 1", logger: logger)) != nil }
                group.addTask { [configuration] in
                    // Twice the operation timeout: a busy server is not a dead connection, and
                    // each needless reconnect makes every client re-read what it holds.
                    try? await Task.sleep(for: configuration.operationTimeout * 2)
                    return false
                }
                let first = await group.next() ?? false
                if !first && !Task.isCancelled { try? await connection.close() }
                group.cancelAll()
                return first
            }
            guard answered || Task.isCancelled else {
                logger.debug("keystore change feed's connection stopped answering; reconnecting", metadata: ["broker.endpoint": "\(configuration.endpoint)"])
                return
            }
        }
    }

    /// Delivers another origin's keys of this namespace (and, for a while after a commit
    /// whose outcome is unknown, this instance's own); ignores everything else. Runs on the
    /// listening connection's event loop.
    private func received(_ payload: String) {
        // Every own commit comes back here too; a byte comparison skips it without parsing
        // its keys into scalars.
        let own = payload.utf8.starts(with: ownHeader.utf8)
        if own && !takesOwnNotifications { return }
        guard let (sender, keys) = namespace.parseNotification(payload), own || sender != origin else { return }
        guard let keys else { return subscribers.deliver([.all]) }
        var seen: Set<String> = []
        subscribers.deliver(keys.filter { seen.insert($0).inserted }.map { .item($0) })
    }
}
