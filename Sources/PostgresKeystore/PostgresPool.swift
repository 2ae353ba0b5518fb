import Logging
import PostgresNIO
import SecureStorage
import Synchronization

/// The keystore's connections: a postgres-nio `PostgresClient` (a pool), replaced by a new
/// one when the server takes connections again while the pool still waits out its backoff.
///
/// postgres-nio retries a failed connection attempt after 100 ms × 1.25ⁿ, up to a minute,
/// and cannot be told to try sooner: after a few minutes' outage a pool would go on failing
/// every call for up to a minute after the server came back. So once a call or the change
/// feed finds the server unreachable (``reportTrouble(on:)``), this type watches for its
/// return itself: it connects outside the pool (as opening a keystore does), after pauses
/// growing to ``PostgresKeystore/Configuration/reconnectDelay`` (to a minute, as the pool's
/// own, while the server refuses logins or has no free slot). Once such a connection
/// succeeds, the pool is replaced only if it has handed out no connection since the watch
/// began, no call holds one of its connections, and a `SELECT 1` through it gets none within
/// the reconnect delay; a pool that hands connections out (its own retry got there first,
/// its calls wait behind slow statements, or a pooler in front lost its server) is kept. The old pool is shut down once no call holds one of its connections (at most two
/// operation timeouts later, when their statements have certainly ended); calls still
/// waiting for one of its connections then run again on the new pool.
final class PostgresPool: Sendable {
    /// One pool and what belongs to it alone.
    final class Generation: Sendable {
        let client: PostgresClient
        /// Connection IDs restart at 0 in every pool, so each pool has its own record of which
        /// connections are set up.
        let setup: ConnectionSetup
        /// 0 for the pool the keystore opened with, then 1, 2, … for each replacement.
        let number: Int
        fileprivate let runTask: Task<Void, Never>
        /// Calls currently holding one of this pool's connections (not the change feed's).
        fileprivate let holding = Atomic<Int>(0)
        /// Whether the pool has handed out a connection yet: until it has, a lease may include
        /// the pool's first connection (TCP, TLS and login), and only a wait longer than that
        /// is slow (``PostgresPool/withConnection(on:holding:_:)``).
        fileprivate let hasLeased = Atomic<Bool>(false)
        /// Set when the pool is replaced: a call that gets one of its connections from then on
        /// hands it back unused and runs again on the new pool (see ``retire(_:)``).
        fileprivate let retired = Atomic<Bool>(false)

        fileprivate init(_ configuration: PostgresKeystore.Configuration, searchPath: String?, number: Int) {
            // Every connection on one event loop (a thread of NIO's shared group): a commit's
            // answer and the notification of the same commit, which arrives on the listening
            // connection right after it, are then read by one thread instead of waking a second.
            // Measured at c = 64: 15-20 % fewer context switches and ~10 % less client CPU per
            // durable federation; the loop itself used ~0.2 of a CPU there.
            let client = PostgresClient(
                configuration: PostgresKeystore.clientConfiguration(configuration),
                eventLoopGroup: PostgresClient.defaultEventLoopGroup.next())
            self.client = client
            self.setup = ConnectionSetup(
                statementTimeout: configuration.operationTimeout, holdOff: configuration.reconnectDelay, searchPath: searchPath)
            self.number = number
            // Detached: the pool lives until the keystore closes, whatever task opened it or
            // reported the trouble that replaced it (`run()` also ends at a ServiceLifecycle
            // graceful shutdown of the task it runs in).
            self.runTask = Task.detached { await client.run() }
        }
    }

    private struct State: Sendable {
        var current: Generation
        /// The running watch for the server's return, if any.
        var watch: Task<Void, Never>?
        /// Whether trouble was reported while the watch ran (it watches again if it ends
        /// without replacing the pool).
        var troubledAgain = false
        var closed = false
        /// Pools replaced but not yet shut down.
        var retiring: [Generation] = []
    }

    let configuration: PostgresKeystore.Configuration
    /// The schema the keystore's open checked (quoted), every connection's `search_path`.
    private let searchPath: String?
    private let logger: Logger
    private let state: Mutex<State>
    /// Connections the pools handed out, ever: a watch compares it with its value when the
    /// watch began. A lease, not a success: a pool whose calls wait behind slow statements
    /// (or behind a pooler that lost its server) still hands connections out, and replacing
    /// it would not help.
    private let served = Atomic<Int>(0)

    /// Calls still waiting for a connection after the reconnect delay (see ``withConnection(on:holding:_:)``).
    private let slowLeases: DeadlineQueue
    /// The same for a pool that has handed out no connection yet, after the connect timeout
    /// and the reconnect delay: its first lease waits for a connection to be made.
    private let firstLeases: DeadlineQueue

    /// - Parameter searchPath: The schema (quoted) the open found the tables in and checked:
    ///   every connection looks its tables up there alone, so tables another role creates later
    ///   where the default path would find them first (a schema named after the fleet's role,
    ///   `public` where every role may create) are never used. `nil` leaves the path as is.
    init(configuration: PostgresKeystore.Configuration, searchPath: String? = nil, logger: Logger) {
        self.configuration = configuration
        self.searchPath = searchPath
        self.logger = logger
        self.state = Mutex(State(current: Generation(configuration, searchPath: searchPath, number: 0)))
        self.slowLeases = DeadlineQueue(Self.reconnectDelay(configuration))
        self.firstLeases = DeadlineQueue(configuration.connectTimeout + Self.reconnectDelay(configuration))
    }

    /// The pool that new calls use.
    var current: Generation { state.withLock { $0.current } }

    /// How many times the pool was replaced (for tests).
    var replacements: Int { current.number }

    /// How many watches for the server's return were started (for tests).
    var watchesStarted: Int { startedWatches.load(ordering: .relaxed) }
    private let startedWatches = Atomic<Int>(0)

    /// Runs `body` on a connection of `generation`'s pool. `holding` calls delay the pool's
    /// shutdown when it is replaced, and a pool with such calls is not replaced.
    ///
    /// A `holding` call that gets no connection within the reconnect delay, from a pool that
    /// meanwhile handed out none and holds none, reports trouble while it goes on waiting: a
    /// pool that nobody used while the server was away (no change stream) learns of the
    /// outage only now, and may be waiting out a backoff of up to a minute although the
    /// server is back. The watch then replaces it, and the call runs on the new pool (it used
    /// to wait for its deadline and fail). A pool that is only busy hands connections out or
    /// holds them meanwhile: no watch, which would find just that. A pool that has handed out
    /// no connection yet is given the connect timeout on top, for its first connection.
    func withConnection<T: Sendable>(
        on generation: Generation,
        holding: Bool = true,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        let leased = Flag()
        let servedBefore = servedSoFar
        // A pool that has handed out nothing yet may be making its first connection, which
        // may take up to the connect timeout on a slow link: a watch then would only log in
        // once more, and might replace a pool that was about to serve.
        let deadlines = generation.hasLeased.load(ordering: .relaxed) ? slowLeases : firstLeases
        // A call made already cancelled ends without waiting, however long postgres-nio takes
        // to say so on a loaded machine: it says nothing about the pool.
        let slowLease = holding && !Task.isCancelled
            ? deadlines.register { [weak self] in
                guard let self, !leased.isSet, self.isIdle(generation, since: servedBefore) else { return }
                self.reportTrouble(on: generation)
            }
            : nil
        defer { if let slowLease { deadlines.cancel(slowLease) } }
        return try await generation.client.withConnection { connection in
            leased.set()
            generation.hasLeased.store(true, ordering: .relaxed)
            guard holding else {
                served.add(1, ordering: .relaxed)
                return try await body(connection)
            }
            // Counted, then checked: with `retire(_:)`'s flag set, then count read, either
            // the retirement waits for this call or this call sees the flag (both orders
            // sequentially consistent). A lease the pool made just before it was replaced,
            // but whose caller runs only now, must not start on a pool being shut down.
            generation.holding.add(1, ordering: .sequentiallyConsistent)
            defer { generation.holding.subtract(1, ordering: .sequentiallyConsistent) }
            guard !generation.retired.load(ordering: .sequentiallyConsistent) else { throw RetiredPool() }
            served.add(1, ordering: .relaxed)
            return try await body(connection)
        }
    }

    /// Whether `generation` was replaced while the keystore is still open: a call that failed
    /// on it can run again on ``current``.
    func wasReplaced(_ generation: Generation) -> Bool {
        state.withLock { !$0.closed && $0.current !== generation }
    }

    /// Tells the pool that a call or the change feed on `generation` found the server
    /// unreachable; starts watching for its return unless a watch is running. Trouble on a
    /// pool already replaced is ignored.
    func reportTrouble(on generation: Generation) {
        let started = state.withLock { state -> Bool in
            guard !state.closed, state.current === generation else { return false }
            guard state.watch == nil else {
                state.troubledAgain = true
                return false
            }
            let servedBefore = served.load(ordering: .relaxed)
            state.watch = Task.detached { await self.watch(servedBefore: servedBefore) }
            return true
        }
        if started {
            startedWatches.add(1, ordering: .relaxed)
            logger.debug("keystore watches for the server's return", metadata: ["broker.endpoint": "\(configuration.endpoint)"])
        }
    }

    /// Connects outside the pool until the server takes a connection or the pool hands one
    /// out; replaces the pool when the server takes one while the pool has handed out none
    /// since `servedBefore`, no call holds one of its connections, and a `SELECT 1` through
    /// it gets no connection either.
    private func watch(servedBefore: Int) async {
        var pauses = WatchPauses(reconnectDelay: reconnectDelay)
        var replaced = false
        defer {
            let again = state.withLock { state -> Generation? in
                state.watch = nil
                defer { state.troubledAgain = false }
                return !state.closed && !replaced && state.troubledAgain ? state.current : nil
            }
            if let again { reportTrouble(on: again) }
        }
        while true {
            try? await Task.sleep(for: pauses.take())
            let old = current
            guard !isClosed, !hasServed(old, since: servedBefore) else { return }
            do {
                let probe = try await PostgresKeystore.connect(configuration, logger: logger)
                try? await probe.close()
            } catch {
                pauses.failed(sqlState: (error as? PSQLError).flatMap { $0.code == .server ? $0.serverInfo?[.sqlState] : nil })
                continue
            }
            guard !hasServed(old, since: servedBefore), !(await answers(old)), !hasServed(old, since: servedBefore) else {
                return
            }
            replaced = replace(old, aimingAt: configuration)
            if replaced {
                logger.debug("keystore replaced its connection pool, which had not reconnected to the server", metadata: [
                    "broker.endpoint": "\(configuration.endpoint)",
                ])
            }
            return
        }
    }

    /// The watch's longest pause while the server cannot be reached, and how long a pool has
    /// to answer its check.
    private var reconnectDelay: Duration { Self.reconnectDelay(configuration) }

    private static func reconnectDelay(_ configuration: PostgresKeystore.Configuration) -> Duration {
        max(.milliseconds(100), configuration.reconnectDelay)
    }

    /// Puts a new pool aimed at `target` in place of `old` and retires `old`, unless the
    /// keystore closed or `old` is no longer the current pool; returns whether it did.
    fileprivate func replace(_ old: Generation, aimingAt target: PostgresKeystore.Configuration) -> Bool {
        let swapped = state.withLock { state -> Bool in
            guard !state.closed, state.current === old else { return false }
            state.current = Generation(target, searchPath: searchPath, number: old.number + 1)
            state.retiring.append(old)
            old.retired.store(true, ordering: .sequentiallyConsistent)
            return true
        }
        if swapped { Task.detached { await self.retire(old) } }
        return swapped
    }

    /// Connections the pools have handed out so far, for ``isIdle(_:since:)``.
    var servedSoFar: Int { served.load(ordering: .relaxed) }

    /// Whether no pool handed out a connection since `servedBefore` (a value of
    /// ``servedSoFar``) and no call holds one of `generation`'s: a wait for a connection
    /// then says the pool cannot get one, not that it is busy.
    func isIdle(_ generation: Generation, since servedBefore: Int) -> Bool {
        !hasServed(generation, since: servedBefore)
    }

    /// Whether any pool handed out a connection since `servedBefore`, or a call holds one of
    /// `generation`'s.
    private func hasServed(_ generation: Generation, since servedBefore: Int) -> Bool {
        served.load(ordering: .relaxed) != servedBefore || generation.holding.load(ordering: .relaxed) > 0
    }

    /// Whether a `SELECT 1` through `generation`'s pool answers within the reconnect delay.
    private func answers(_ generation: Generation) async -> Bool {
        do throws(KeystoreError) {
            try await OperationDeadline.run(reconnectDelay, onTimeout: { KeystoreError(.storeUnavailable, "no connection") }) {
                () throws(KeystoreError) in
                do {
                    try await self.withConnection(on: generation, holding: false) { connection in
                        try await connection.runUnlessClosed("SELECT 1", logger: self.logger)
                    }
                } catch {
                    throw KeystoreError(.storeUnavailable, "no connection")
                }
            }
            return true
        } catch {
            return false
        }
    }

    /// Shuts `old` down once no call holds one of its connections, or two operation timeouts
    /// later: by then every statement sent on it has ended (the server's statement timeout)
    /// or its connection was closed. `old` is marked retired before the count is read, so a
    /// call that gets one of its connections afterwards, however late its task runs, hands
    /// it back unused (``withConnection(on:holding:_:)``) instead of starting on a connection
    /// about to close. Calls waiting for a connection fail and run again on the new pool; the
    /// change feed reconnects.
    private func retire(_ old: Generation) async {
        let giveUp = ContinuousClock.now.advanced(by: configuration.operationTimeout * 2)
        while old.holding.load(ordering: .sequentiallyConsistent) > 0, ContinuousClock.now < giveUp, !isClosed {
            try? await Task.sleep(for: .milliseconds(20))
        }
        old.runTask.cancel()
        await old.runTask.value
        state.withLock { $0.retiring.removeAll { $0 === old } }
    }

    private var isClosed: Bool { state.withLock { $0.closed } }

    /// Shuts every pool down and returns when their connections are closed. A watch still
    /// running ends at its next step (a probe connection it is opening is closed at once);
    /// trouble reported afterwards is ignored.
    func close() async {
        let generations = shutDown()
        for generation in generations { await generation.runTask.value }
    }

    /// Starts shutting every pool down without waiting (for `deinit`); returns the pools.
    @discardableResult
    func shutDown() -> [Generation] {
        let (generations, watch) = state.withLock { state -> ([Generation], Task<Void, Never>?) in
            state.closed = true
            return ([state.current] + state.retiring, state.watch)
        }
        watch?.cancel()
        for generation in generations { generation.runTask.cancel() }
        return generations
    }
}

extension PostgresPool {
    /// Puts a pool aimed at `other` in place of the current one, which is retired as after a
    /// replacement (for tests: a pool aimed at a port where nothing listens stands for one
    /// waiting out its backoff while the server is back).
    func replaceForTesting(aimingAt other: PostgresKeystore.Configuration) {
        _ = replace(current, aimingAt: other)
    }
}
