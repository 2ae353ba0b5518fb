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
/// that stops answering, or on which notifications stop arriving, is closed and replaced the
/// same way (``PostgresKeystore/Configuration/changeFeedHeartbeat``).
final class PostgresChangeFeed: Sendable {
    private let subscribers: ChangeFanOut
    let pool: PostgresPool
    private let namespace: PostgresNamespace
    private let origin: Int64
    /// What starts this instance's own notifications (the header is prefix-free).
    private let ownHeader: String
    let configuration: PostgresKeystore.Configuration
    let logger: Logger
    private let listening = Atomic<Bool>(false)
    /// This instance's keys whose commit may yet land, and until when (see
    /// ``commitMayHaveApplied(_:window:)``); `hasUncertain` mirrors whether there are any,
    /// for the event loop's check of every own notification.
    private let uncertain = Mutex(UncertainKeys())
    private let hasUncertain = Atomic<Bool>(false)
    /// The start of every notification about this namespace.
    private let namespacePrefix: String
    /// The start of this instance's heartbeat notifications (see ``Heartbeat``).
    let heartbeatHeader: String
    /// Every operation's deadline, for the heartbeat's `NOTIFY`.
    let deadlines: DeadlineQueue

    init(
        pool: PostgresPool, namespace: PostgresNamespace, origin: Int64,
        configuration: PostgresKeystore.Configuration, deadlines: DeadlineQueue, logger: Logger
    ) {
        self.pool = pool
        self.namespace = namespace
        self.origin = origin
        self.ownHeader = namespace.notificationHeader(origin: origin)
        self.namespacePrefix = namespace.notificationPrefix
        self.heartbeatHeader = PostgresNamespace.heartbeatHeader(origin: origin)
        self.deadlines = deadlines
        self.configuration = configuration
        self.logger = logger
        self.subscribers = ChangeFanOut(bufferSize: max(2, configuration.changeBufferSize))
    }

    /// Whether the listener currently holds a connection with `LISTEN` active (for tests).
    var isListening: Bool { listening.load(ordering: .acquiring) }

    /// The heartbeat checks made on a listening connection, how many of them committed a
    /// notification of their own, and how many passed on other instances' notifications alone
    /// (for tests, which count in checks rather than seconds).
    let heartbeatChecks = Atomic<Int>(0)
    let heartbeatsSent = Atomic<Int>(0)
    let heartbeatChecksPassedOnOthers = Atomic<Int>(0)

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
    /// lost, a timeout while it ran, a statement still queued on the server): every
    /// subscriber, the writer's too, is told the keys changed, and for `window` this
    /// instance's own notifications naming them are delivered like another's, so a commit
    /// that lands late is heard of. Otherwise the feed skips its own notifications, and a
    /// client sharing this keystore with the writer would never learn of such a commit.
    func commitMayHaveApplied(_ keys: [String], window: Duration) {
        let until = ContinuousClock.now.advanced(by: window)
        uncertain.withLock { uncertain in
            uncertain.add(keys, until: until)
            hasUncertain.store(!uncertain.isEmpty, ordering: .releasing)
        }
        var seen: Set<ItemKey.Exact> = []
        subscribers.deliver(keys.filter { seen.insert(ItemKey.Exact($0)).inserted }.map { (change: KeystoreChange.item($0), writer: nil) })
    }

    private var hasUncertainKeys: Bool { hasUncertain.load(ordering: .acquiring) }

    /// Those of `keys` whose commit is still uncertain.
    private func uncertainKeys(among keys: [String]) -> [String] {
        uncertain.withLock { uncertain in
            let found = uncertain.current(among: keys)
            hasUncertain.store(!uncertain.isEmpty, ordering: .releasing)
            return found
        }
    }

    /// Keys whose commit may yet land, each until its window ends; windows that ended are
    /// forgotten at most once a second (a scan of every key).
    struct UncertainKeys {
        /// The most keys followed at once; past it (a long outage of a busy instance), new
        /// ones are not.
        static let limit = 10_000
        private var until: [ItemKey.Exact: ContinuousClock.Instant] = [:]
        private var lastSweep = ContinuousClock.now
        /// When the window of the last key left out for want of room ends.
        private var leftOutUntil: ContinuousClock.Instant?

        var isEmpty: Bool { until.isEmpty && !isFull }
        /// Whether keys left out for want of room may still land: then every key this
        /// instance's notifications name may be one of them.
        var isFull: Bool { leftOutUntil.map { $0 > .now } ?? false }
        /// Every key whose window has not ended.
        var all: [String] {
            let now = ContinuousClock.now
            return until.compactMap { $0.value > now ? $0.key.key : nil }
        }

        mutating func add(_ keys: [String], until end: ContinuousClock.Instant) {
            sweep(force: until.count >= Self.limit)
            for key in keys {
                guard until.count < Self.limit || until[ItemKey.Exact(key)] != nil else {
                    leftOutUntil = max(leftOutUntil ?? end, end)
                    continue
                }
                until[ItemKey.Exact(key)] = end
            }
        }

        mutating func current(among keys: [String]) -> [String] {
            sweep(force: false)
            let now = ContinuousClock.now
            var seen: Set<ItemKey.Exact> = []
            // Keys left out are not named here: any key may be one (an extra re-read of an
            // own key costs less than a change nobody hears of).
            let full = isFull
            return keys.filter { key in (full || (until[ItemKey.Exact(key)].map { $0 > now } ?? false)) && seen.insert(ItemKey.Exact(key)).inserted }
        }

        private mutating func sweep(force: Bool) {
            let now = ContinuousClock.now
            guard force || now - lastSweep >= .seconds(1) else { return }
            lastSweep = now
            until = until.filter { $0.value > now }
            if !isFull { leftOutUntil = nil }
        }
    }

    /// The least time between two warnings that the feed lost its connection.
    static let warningInterval: Duration = .seconds(300)

    /// Ends every stream and stops the listener.
    func close() {
        subscribers.close()
    }

    // MARK: Listener

    /// Listens until cancelled, reconnecting after every failure.
    private func listen() async {
        var pause: Duration = .milliseconds(50)
        var reconnecting = false
        var lastWarning: ContinuousClock.Instant?
        while !Task.isCancelled {
            var listeningSince: ContinuousClock.Instant?
            let generation = pool.current
            // A connection that does not come within the operation timeout (a pool still backing
            // off after the server came back) is trouble, as for a call: waiting for one has no
            // deadline here, and the pool gives up on its own only after a minute.
            let leased = Flag()
            let heartbeat = Heartbeat()
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
                    var checks: Task<Void, Never>?
                    if let interval = self.configuration.changeFeedHeartbeat, interval > .zero {
                        checks = Task { await self.closeWhenDeaf(connection, every: interval, heartbeat: heartbeat) }
                    }
                    do {
                        try await self.listen(on: connection, generation: generation, heartbeat: heartbeat, reconnecting: reconnecting) { listeningSince = $0 }
                    } catch {
                        await Self.end(checks)
                        throw error
                    }
                    await Self.end(checks)
                }
            } catch {
                // Lost or never had (the server is away): the pool watches for its return. Not
                // when the heartbeat closed a connection that answers but hears nothing: the
                // server is there.
                if !Task.isCancelled && !heartbeat.closedAsDeaf { pool.reportTrouble(on: generation) }
                // The server's text, bounded: a long one would flood every line.
                let reason = KeystoreError.postgres(error, operation: "listening", configuration: configuration).reason
                let metadata: Logger.Metadata = [
                    "broker.endpoint": "\(configuration.endpoint)",
                    "broker.error": "\(String(String.UnicodeScalarView(reason.unicodeScalars.prefix(256))))",
                ]
                // A warning at most every few minutes: meanwhile this instance hears no other
                // instance's changes, and what it caches may be stale until the feed is back.
                let now = ContinuousClock.now
                if !Task.isCancelled, lastWarning.map({ now - $0 >= Self.warningInterval }) ?? true {
                    lastWarning = now
                    logger.warning(
                        "keystore change feed lost its connection; other instances' changes are not heard until it reconnects", metadata: metadata)
                } else {
                    logger.debug("keystore change feed lost its connection", metadata: metadata)
                }
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

    /// Notifications that wait to be parsed, at most; beyond, the oldest is dropped and
    /// subscribers get ``KeystoreChange/all``. At 8,000 bytes each, 8 MB.
    static let pendingLimit = 1_024

    /// Returns once the server reports the connection listening on the channel.
    ///
    /// Adding the listener sends LISTEN at once, or, on a connection whose previous listener
    /// still has an UNLISTEN queued, after it: so this asks the server rather than sending a
    /// LISTEN of its own, which could put the connection in listening while postgres-nio
    /// still expects it not to (a notification then would stop the process).
    private func waitUntilListening(on connection: PostgresConnection) async throws {
        let started = ContinuousClock.now
        var pause: Duration = .milliseconds(2)
        while true {
            // Unless closed: a statement written to a closed connection is never answered.
            let rows = try await connection.queryUnlessClosed(Self.listeningCheck, logger: logger).rows
            if try rows.first?.decode(Bool.self) == true { return }
            guard ContinuousClock.now - started < configuration.operationTimeout else { throw NotListening() }
            try await Task.sleep(for: pause)
            pause = min(pause * 2, .milliseconds(200))
        }
    }

    private static let listeningCheck = PostgresQuery(
        unsafeSQL: "SELECT EXISTS (SELECT FROM pg_catalog.pg_listening_channels() AS c WHERE c = '\(PostgresSchema.channel)')")

    /// The server did not report the connection listening within the operation timeout.
    struct NotListening: Error, CustomStringConvertible {
        var description: String { "LISTEN did not take effect" }
    }

    /// Listens on `connection` until it closes (or the task is cancelled): sets the session
    /// up, attaches the listener, and delivers what arrives; calls `onListening` once `LISTEN`
    /// took effect.
    private func listen(
        on connection: PostgresConnection, generation: PostgresPool.Generation, heartbeat: Heartbeat, reconnecting: Bool,
        onListening: (ContinuousClock.Instant) -> Void
    ) async throws {
        // The session's settings as for every keystore connection; `idle_session_timeout`
        // among them, which would otherwise end this connection each time it ran out.
        try await generation.setup.prepare(connection, logger: logger)
        // Notifications reach the listener callback on the connection's event loop,
        // which skips this instance's own and other namespaces' by comparing bytes
        // (no thread hand-off for them) and queues the rest, at most
        // `pendingLimit`, for a task that parses them off the event loop.
        // postgres-nio's notification sequence would buffer without bound instead.
        let (pending, queue) = AsyncStream.makeStream(
            of: String.self, bufferingPolicy: .bufferingNewest(Self.pendingLimit))
        let overflowed = Atomic<Bool>(false)
        let listener = try await connection.addListenerUnlessClosed(channel: PostgresSchema.channel) { _, notification in
            guard self.concerns(notification.payload, heartbeat: heartbeat) else { return }
            if case .dropped = queue.yield(notification.payload) { overflowed.store(true, ordering: .releasing) }
        }
        // Detaching the last listener of the channel sends UNLISTEN.
        defer { listener.stop() }
        try await waitUntilListening(on: connection)
        heartbeat.listenTookEffect()
        listening.store(true, ordering: .releasing)
        onListening(.now)
        // What was committed while nobody listened is reloaded, not replayed.
        subscribers.deliver([.all])
        if reconnecting {
            logger.debug("keystore change feed reconnected", metadata: ["broker.endpoint": "\(configuration.endpoint)"])
        }
        let parsing = Task {
            for await payload in pending {
                // A notification dropped for room: every key may have changed.
                if overflowed.exchange(false, ordering: .acquiringAndReleasing) { self.subscribers.deliver([.all]) }
                self.received(payload)
            }
        }
        defer {
            queue.finish()
            parsing.cancel()
        }
        try await Self.untilClosed(connection)
    }

    /// Cancels the heartbeat's checks and waits for them to end, so that none acts on the
    /// connection once it went back to the pool (a check's `close()` would end another
    /// caller's statement there).
    private static func end(_ checks: Task<Void, Never>?) async {
        checks?.cancel()
        await checks?.value
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

    /// Whether a notification may concern this instance's subscribers: one of this
    /// namespace from another origin, or this instance's own while a commit's outcome is
    /// uncertain. Decided on the event loop, on the bytes, where every notification is noted
    /// in `heartbeat` as proof that the connection hears.
    private func concerns(_ payload: String, heartbeat: Heartbeat) -> Bool {
        heartbeat.heardSomething()
        // Every own commit comes back here too, skipped without a hand-off or a parse.
        if payload.utf8.starts(with: ownHeader.utf8) {
            heartbeat.heardOwnCommit()
            return hasUncertainKeys
        }
        if payload.utf8.starts(with: namespacePrefix.utf8) { return true }
        if payload.utf8.starts(with: heartbeatHeader.utf8) { heartbeat.heard(payload) }
        return false
    }

    /// Delivers another origin's keys of this namespace, and this instance's own keys whose
    /// commit is uncertain; ignores everything else.
    private func received(_ payload: String) {
        guard let (sender, keys) = namespace.parseNotification(payload) else { return }
        if sender == origin {
            guard let keys else {
                // Every key of one of its commits: all those still uncertain, or every key
                // when too many are followed to name.
                let (all, complete) = uncertain.withLock { ($0.all, !$0.isFull) }
                return complete ? subscribers.deliver(all.map { (change: KeystoreChange.item($0), writer: nil) }) : subscribers.deliver([.all])
            }
            let uncertain = uncertainKeys(among: keys)
            if !uncertain.isEmpty { subscribers.deliver(uncertain.map { (change: KeystoreChange.item($0), writer: nil) }) }
            return
        }
        guard let keys else { return subscribers.deliver([.all]) }
        var seen: Set<ItemKey.Exact> = []
        subscribers.deliver(keys.filter { seen.insert(ItemKey.Exact($0)).inserted }.map { .item($0) })
    }
}
