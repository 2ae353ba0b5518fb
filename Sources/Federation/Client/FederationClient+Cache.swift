#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SecureStorage

/// A session as the cache holds it: its state machine, a generation that changes whenever
/// what the session holds changes here (so a store read that raced with such a change is
/// recognised and dropped; the change's own feed event reloads it again), and whether a
/// reload, or a write, failed (a later read tries the store again).
struct CachedSession: Sendable {
    var machine: SessionStateMachine
    var generation: UInt64
    /// Set when the entry may not be what the store holds: the first read at or after this
    /// instant starts a re-read in the background (see `FederationClient+Reload`).
    var reloadAfter: ContinuousClock.Instant?
    /// Until when a write of the session whose outcome is unknown may still land in the store.
    var uncertainUntil: ContinuousClock.Instant?
}

/// The cache over the store: first reads, applying changes, the change feed, expiry
/// announcements and the per-session lock.
extension FederationClient {
    // MARK: Reading through the cache

    /// How many times a first read is tried while the feed reports changes of its session.
    static let firstReadAttempts = 3

    /// The cached session, or the store's record once read (and cached).
    ///
    /// A first read during which the feed reported a change of the session may hold what
    /// the change replaced: it is read again, and after ``firstReadAttempts`` cached and read
    /// again at once in the background. A cached session that may not be what the store holds (a reload or a
    /// write of it failed) answers at once, and is read again in the background.
    func cachedOrLoaded(_ session: String) async throws(FederationError) -> SessionStateMachine {
        startChangeFeed()
        if let cached = cache.get(session) {
            if let reloadAfter = cached.reloadAfter, reloadAfter <= .now { reloadInTheBackground(session) }
            return cached.machine
        }
        for attempt in 1...Self.firstReadAttempts {
            let began = callsInFlight.begin(session)
            let loaded: Result<SessionRecord?, FederationError>
            do throws(FederationError) {
                loaded = .success(try await store.load(session))
            } catch {
                loaded = .failure(error)
            }
            let raced = callsInFlight.end(session, began: began)
            let record = try loaded.get()
            // A federation, clear or feed update may have filled the entry while this read waited.
            if let cached = cache.get(session) { return cached.machine }
            let machine = SessionStateMachine(record: record, now: now(), margin: expiryMargin)
            if raced && attempt < Self.firstReadAttempts { continue }
            if raced {
                logger.debug("session changing during every read; cached for a re-read", metadata: ["broker.session": "\(session)"])
            }
            insert(session, machine, needsReload: raced)
            return cache.peek(session)?.machine ?? machine
        }
        preconditionFailure("the last attempt returns")
    }

    /// ``cachedOrLoaded(_:)``, after letting the clock act: a read past the expiry (or a
    /// reminder's due time) announces it, even before the timer fires. With `reminders` off,
    /// a due reminder waits for the next tick.
    func current(_ session: String, reminders: Bool = true) async throws(FederationError) -> SessionStateMachine {
        let machine = try await cachedOrLoaded(session)
        return tick(session, reminders: reminders) ?? machine
    }

    /// The state a new observer of `session` starts with (following the store from now on);
    /// an unreadable session reads `notFederated` to the observer, and is logged. A reminder
    /// already due is left for the tick after the observer subscribes, so it reaches it.
    func stateForNewObserver(_ session: String) async -> SessionState {
        startChangeFeed()
        do {
            return try await current(session, reminders: false).state(now: now(), margin: expiryMargin)
        } catch {
            logger.debug("observed session unreadable", metadata: ["broker.session": "\(session)", "broker.error": "\(error.code)"])
            // Tried again by itself (the observer subscribes before the retry is due): the
            // observer learns the session's state once the store answers.
            retryReload(of: session)
            return .notFederated
        }
    }

    func snapshot(_ name: String, _ machine: SessionStateMachine) -> SessionSnapshot {
        Self.snapshot(name, machine, now: now(), margin: expiryMargin)
    }

    static func snapshot(_ name: String, _ machine: SessionStateMachine, now: Date, margin: Duration) -> SessionSnapshot {
        let state = machine.state(now: now, margin: margin)
        guard let record = machine.record else { return SessionSnapshot(name: name, state: state) }
        return SessionSnapshot(
            name: name,
            state: state,
            identityId: record.identityId,
            provider: record.provider.flatMap(AuthProvider.init(identifier:)),
            isGuest: record.isGuest,
            credentials: state == .federated ? record.credentials : nil,
            expiration: record.credentials?.expiration
        )
    }

    // MARK: Applying changes

    /// Applies `transition` to `session`'s machine (creating an empty one when it is not
    /// cached), publishes what it returns, and schedules the session's expiry.
    ///
    /// `localWrite` marks a change this client committed (a federation, a clear): store reads
    /// in flight began before it and are dropped even when the record looks the same (a
    /// clear of a session cached as absent must still beat a reload that read another
    /// client's federation before the clear).
    func apply(_ session: String, localWrite: Bool = false, _ transition: (inout SessionStateMachine, Date, Duration) -> SessionState?) {
        let current = now()
        let cached = cache.peek(session)
        var entry = cached ?? CachedSession(machine: SessionStateMachine(record: nil, now: current, margin: expiryMargin), generation: 0)
        let before = entry.machine.record
        let announcedBefore = entry.machine.announced
        let announced = transition(&entry.machine, current, expiryMargin)
        if cached == nil { adopt(session, into: &entry) }
        // Only a change of what the session holds makes a store read in flight stale; a
        // clock tick or a read must not, or reloads racing with reads would be dropped.
        if localWrite || entry.machine.record != before || entry.generation == 0 {
            entry.generation = newGeneration()
        }
        if localWrite {
            entry.reloadAfter = Self.nextReload(whileUncertain: &entry.uncertainUntil)
            // A first read in flight read before this commit; should the entry be evicted
            // before it ends, it must not cache what it read.
            callsInFlight.changed(session)
        }
        if let announced { publish(announced, session: session) }
        place(session, entry, replacing: cached == nil ? nil : announcedBefore)
    }

    private func insert(_ session: String, _ machine: SessionStateMachine, needsReload: Bool) {
        var entry = CachedSession(machine: machine, generation: newGeneration())
        adopt(session, into: &entry)
        if needsReload { entry.reloadAfter = .now }
        place(session, entry, replacing: nil)
        // Observed but not cached: every observer was told `notFederated` (the session could
        // not be read when it subscribed).
        if broadcaster.isObserved(session), entry.machine.announced != .notFederated {
            publish(entry.machine.announced, session: session)
        }
        // What was read may be what a change replaced; nobody may read it again soon.
        if needsReload { reloadInTheBackground(session) }
    }

    /// Drops `session`'s entry when it holds no record and no federation of it is in flight
    /// (one made by a federation over an item that could not be opened, which failed), so
    /// that the next read goes to the store.
    func uncacheIfHoldingNothing(_ session: String) {
        guard let entry = cache.peek(session), entry.machine.record == nil, entry.machine.inFlight == 0,
              cache.remove(session) != nil
        else { return }
        forget([(session, entry)])
        if let sessionGauges {
            sessionCounts[entry.machine.announced, default: 0] -= 1
            sessionGauges.record(entry.machine.announced, sessionCounts[entry.machine.announced, default: 0])
        }
    }

    /// Caches `record` as a first read of `session` caches it: announced to nobody, since
    /// nothing changed (observers of the session told `notFederated` while it could not be
    /// read excepted).
    func cacheFirstRead(_ session: String, _ record: SessionRecord?) {
        insert(session, SessionStateMachine(record: record, now: now(), margin: expiryMargin), needsReload: false)
    }

    /// What a session coming (back) into the cache takes over from its time outside: what
    /// it was reminded of, and the uncertain window of a write that failed meanwhile.
    private func adopt(_ session: String, into entry: inout CachedSession) {
        if let memory = reminderMemories.remove(session) { entry.machine.recall(memory) }
        takeUncertainWrite(of: session, into: &entry)
    }

    /// Caches `entry`, keeps what the entries it evicts need, the gauges and the schedule.
    /// `replacing` is the state announced for the entry it replaces (`nil` for a new one).
    private func place(_ session: String, _ entry: CachedSession, replacing announcedBefore: SessionState?) {
        let evicted = cache.set(session, entry, isPinned: isPinned)
        forget(evicted)
        if sessionGauges != nil {
            countSessions(removing: announcedBefore, adding: entry.machine.announced, evicted: evicted.map(\.value))
        }
        scheduleExpiry(of: session, entry.machine)
    }

    /// A generation no entry has had yet.
    func newGeneration() -> UInt64 {
        nextGeneration += 1
        return nextGeneration
    }

    /// Keeps what evicted sessions were reminded of or postponed, so that reading one again
    /// neither reminds twice nor forgets a "not now", and the uncertain window of a failed
    /// write.
    private func forget(_ evicted: [(key: String, value: CachedSession)]) {
        for (session, entry) in evicted {
            if let memory = entry.machine.reminderMemory {
                reminderMemories.set(session, memory) { _, _ in false }
            }
            // A write whose outcome is unknown may still land: the next read that caches the
            // session keeps re-reading it.
            if let until = entry.uncertainUntil { keepUncertainWindow(of: session, until: until) }
            // A read in flight began while the entry held what the store had; gone, nothing
            // would tell that read about a local change made before the eviction.
            callsInFlight.changed(session)
        }
    }

    /// Keeps the `identity_broker_sessions` gauges (sessions held, by state) current.
    private func countSessions(removing old: SessionState?, adding new: SessionState, evicted: [CachedSession]) {
        var changed: Set<SessionState> = []
        if let old, old != new {
            sessionCounts[old, default: 0] -= 1
            changed.insert(old)
        }
        if old != new {
            sessionCounts[new, default: 0] += 1
            changed.insert(new)
        }
        for entry in evicted {
            sessionCounts[entry.machine.announced, default: 0] -= 1
            changed.insert(entry.machine.announced)
        }
        for state in changed { sessionGauges?.record(state, sessionCounts[state, default: 0]) }
    }

    /// Sessions that must stay cached: one being federated or cleared, or observed.
    private var isPinned: (String, CachedSession) -> Bool {
        { [locks, broadcaster] session, entry in
            entry.machine.inFlight > 0 || locks.isHeld(session) || broadcaster.isObserved(session)
        }
    }

    private func publish(_ state: SessionState, session: String) {
        logger.debug("session state changed", metadata: ["broker.session": "\(session)", "broker.state": "\(state)"])
        broadcaster.publish(state, session: session)
    }

    // MARK: The change feed

    /// Starts following the keystore's change feed, once.
    func startChangeFeed() {
        guard followsStoreChanges, changeFeed == nil, !shutdownBegan else { return }
        // Our own commits are left out: this client applied each of them itself.
        let changes = store.changesByOthers()
        changeFeed = Task { [weak self] in
            for await change in changes {
                guard let self else { return }
                await self.storeChanged(change)
            }
        }
    }

    /// Makes this client never follow the store's change feed, for a program that makes a
    /// call or two and exits (the command-line tool): following costs a PostgreSQL store a
    /// listening connection (a login) and an SQLite store a poller of its change log on a
    /// connection of its own, for
    /// changes such a program would never wait for. Its reads still go to the store on first
    /// use; what it has cached does not hear of other clients' changes.
    package func stopFollowingStoreChanges() {
        followsStoreChanges = false
        changeFeed?.cancel()
        changeFeed = nil
    }

    private func storeChanged(_ change: KeystoreChange) async {
        switch change {
        case .item(let key):
            guard let session = SessionStore.session(forKey: key) else { return }
            callsInFlight.changed(session)
            guard isFollowed(session) else { return }
            await reload(session)
        case .all:
            callsInFlight.changedAll()
            reloadEverything()
        }
    }

    /// How many sessions a re-read of everything reads at once: enough for a keystore that
    /// groups concurrent reads (PostgreSQL) to answer many in one statement.
    static let reloadWidth = 32
    /// The least time between the starts of two re-reads of everything.
    static let reloadOfEverythingInterval: Duration = .seconds(1)

    /// Re-reads every cached and observed session, `reloadWidth` at a time, in a task of its
    /// own so that the feed's later changes are not held up behind it. `.all` comes after a
    /// reconnect, an overflowing buffer, and from anyone who may `NOTIFY` on a PostgreSQL
    /// database: one that comes while a re-read runs is folded into one more re-read, and no
    /// re-read starts sooner than ``reloadOfEverythingInterval`` after the last one started.
    /// A flood of them thus costs each client at most one re-read of its cache a second, not
    /// one per `.all`.
    func reloadEverything() {
        guard !shutdownBegan else { return }
        guard reloadOfEverything == nil else {
            reloadOfEverythingAgain = true
            return
        }
        reloadOfEverything = Task { [weak self] in
            while true {
                if let earliest = await self?.earliestReloadOfEverything, earliest > .now {
                    try? await Task.sleep(until: earliest)
                }
                guard let sessions = await self?.sessionsToReloadAll() else { return }
                await withTaskGroup(of: Void.self) { group in
                    var pending = sessions.makeIterator()
                    for _ in 0..<Self.reloadWidth {
                        guard let session = pending.next() else { break }
                        group.addTask { await self?.reload(session) }
                    }
                    while await group.next() != nil {
                        guard !Task.isCancelled, let session = pending.next() else { continue }
                        group.addTask { await self?.reload(session) }
                    }
                }
                guard !Task.isCancelled, await self?.reloadEverythingAgain() == true else { return }
            }
        }
    }

    /// When the next re-read of everything may start.
    private var earliestReloadOfEverything: ContinuousClock.Instant? {
        lastReloadOfEverything?.advanced(by: Self.reloadOfEverythingInterval)
    }

    /// The sessions a re-read of everything reads, starting now, or `nil` once the client
    /// shut down.
    private func sessionsToReloadAll() -> Set<String>? {
        guard !shutdownBegan, !Task.isCancelled else { return nil }
        lastReloadOfEverything = .now
        // What this re-read reads covers every `.all` so far.
        reloadOfEverythingAgain = false
        return Set(cache.keys).union(broadcaster.observedSessions())
    }

    /// Whether another `.all` came during the re-read that just ended; if none did, the
    /// re-reads end here, in the same step, so that the next `.all` starts a new one.
    private func reloadEverythingAgain() -> Bool {
        if reloadOfEverythingAgain && !shutdownBegan {
            reloadOfEverythingAgain = false
            return true
        }
        reloadOfEverything = nil
        reloadOfEverythingAgain = false
        return false
    }

    /// Whether a change of `session` by another client matters here.
    func isFollowed(_ session: String) -> Bool {
        cache.peek(session) != nil || broadcaster.isObserved(session) || broadcaster.hasObserversOfAll
    }

    // MARK: Expiry and renewal reminders

    /// Makes sure `session`'s next renewal reminder (when someone would receive it) and
    /// expiry are announced; one timer serves every session.
    func scheduleExpiry(of session: String, _ machine: SessionStateMachine) {
        let reminding = broadcaster.remindersReach(session)
        guard let wakeUp = machine.nextWakeUp(margin: expiryMargin, renewalLead: renewalLead, reminding: reminding) else { return }
        // Already due (a reminder or expiry that passed while nobody looked): as soon as possible.
        schedule(session, dueAt: max(wakeUp, now()))
    }

    /// Puts `session` in the expiry schedule at `due`, and wakes the timer by then.
    private func schedule(_ session: String, dueAt due: Date) {
        expirySchedule.schedule(session, at: due)
        if let armed = expiryTimerDue, armed <= due, expiryTimer != nil { return }
        armExpiryTimer(due: due)
    }

    private func armExpiryTimer(due: Date) {
        // A client that was shut down runs no timer again; reads still compute expiry.
        guard !shutdownBegan else { return }
        expiryTimer?.cancel()
        expiryTimerDue = due
        // At most `longestExpiryTimerSleep`: woken before the due time, the timer finds nothing
        // due and sleeps again, having looked at the wall clock.
        let delay = min(max(0, due.timeIntervalSince(now())), longestExpiryTimerSleep.timeInterval)
        expiryTimerArming &+= 1
        let arming = expiryTimerArming
        expiryTimer = Task { [weak self] in
            do {
                try await Task.sleep(for: .milliseconds(Int64(delay * 1000) + 5))
            } catch {
                return
            }
            await self?.expiryTimerFired(arming: arming)
        }
    }

    private func expiryTimerFired(arming: UInt64) {
        // Replaced after its sleep ended: its successor is the timer now, and stays armed.
        guard arming == expiryTimerArming else { return }
        expiryTimer = nil
        expiryTimerDue = nil
        announceDueExpiries()
    }

    /// Puts back in the schedule the renewal reminders of cached sessions that nobody would
    /// have received (scheduled for their expiry alone): run when an observer of every
    /// session subscribes, so that it is reminded of them, those already due at once. One pass
    /// over the cache, which is bounded.
    func scheduleRemindersNobodyReceived() {
        guard !shutdownBegan else { return }
        for session in cache.keys {
            guard let machine = cache.peek(session)?.machine,
                  machine.renewalDue(margin: expiryMargin, lead: renewalLead) != nil
            else { continue }
            scheduleExpiry(of: session, machine)
        }
    }

    /// Announces the expiry of every cached session now due (and of evicted ones, read back,
    /// when someone observes every session), and re-arms the timer for the
    /// next one. Run when the timer fires and when someone subscribes (the clock may have
    /// moved past a due time before the timer's sleep ends).
    func announceDueExpiries() {
        // A timer that woke as shutdown began, or a stream made after it: nothing to announce.
        guard !shutdownBegan else { return }
        let current = now()
        for entry in expirySchedule.popDue(now: current) {
            if cache.peek(entry.session) != nil {
                evictedReadFailures[entry.session] = nil
                tick(entry.session)
            } else if broadcaster.hasObserversOfAll {
                // Evicted: read back for observers of every session, who would otherwise never
                // hear of its expiry.
                queueEvictedReadBack(entry.session)
            } else {
                // A read-back's retry that is not made: its count would otherwise stay for good.
                evictedReadFailures[entry.session] = nil
            }
        }
        if let next = expirySchedule.next, expiryTimer == nil || expiryTimerDue.map({ next < $0 }) ?? true {
            armExpiryTimer(due: next)
        }
    }

    /// Queues the read-back of an evicted `session` that fell due. They run `reloadWidth` at
    /// a time: a wall clock stepped forward (or a virtual machine resumed) makes every
    /// evicted session of a credential lifetime due at once, and one read each at once would
    /// swamp the store (and, past its timeouts, fail and be retried together).
    private func queueEvictedReadBack(_ session: String) {
        guard evictedReadBacks.queue(session) else { return }
        inBackground { client in await client.readBackEvictedSessions() }
    }

    private func readBackEvictedSessions() async {
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            while true {
                while running < Self.reloadWidth, !Task.isCancelled, let session = evictedReadBacks.next() {
                    group.addTask { await self.announceEvictedExpiry(session) }
                    running += 1
                }
                guard running > 0 else {
                    // In the step that found nothing more: a session queued later starts a reader.
                    evictedReadBacks.readerEnded()
                    return
                }
                await group.next()
                running -= 1
            }
        }
    }

    /// Reads back a session the cache evicted, which fell due, for observers of every session:
    /// announces `expired` when it is, else schedules its expiry. It is not cached again:
    /// that would evict another session and announce this one's state a second time (its
    /// due time may be a renewal reminder's, which only sessions held get). A read that fails
    /// is tried again later (1 s, doubling up to 30 s).
    func announceEvictedExpiry(_ session: String) async {
        guard cache.peek(session) == nil, broadcaster.hasObserversOfAll else {
            evictedReadFailures[session] = nil
            return
        }
        let record: SessionRecord?
        do {
            record = try await store.load(session)
        } catch {
            // Unreachable now (the store away, say): read again later, as an observed session's
            // failed re-read is, or its expiry would never be announced. An item that does not
            // open will not open later either.
            guard !shutdownBegan, !error.isUnreadableItem, cache.peek(session) == nil, broadcaster.hasObserversOfAll else {
                evictedReadFailures[session] = nil
                return
            }
            let failures = (evictedReadFailures[session] ?? 0) + 1
            evictedReadFailures[session] = failures
            schedule(session, dueAt: now().addingTimeInterval(Self.retryDelay(afterFailures: failures).timeInterval))
            return
        }
        evictedReadFailures[session] = nil
        guard let record, cache.peek(session) == nil  // cached meanwhile: its own machine announces
        else { return }
        switch record.state(now: now(), margin: expiryMargin) {
        case .expired:
            publish(.expired, session: session)
        case .federated:
            guard let expiration = record.credentials?.expiration else { return }
            schedule(session, dueAt: expiration.addingTimeInterval(-expiryMargin.timeInterval))
        default:
            break
        }
    }

    /// Lets the clock act on a cached `session`: announces an expiry and, with `reminders`,
    /// delivers a due reminder, when anyone would receive it (else the reminder stays due,
    /// for the first observer that subscribes before the session expires). Returns the
    /// session's machine; `nil` (and nothing done) when it is not cached: an empty entry made
    /// here would read `notFederated` until the session next changed.
    @discardableResult
    func tick(_ session: String, reminders: Bool = true) -> SessionStateMachine? {
        guard cache.peek(session) != nil else { return nil }
        let reminders = reminders && broadcaster.remindersReach(session)
        var reminder: Date?
        apply(session) { machine, now, margin in
            let (state, remind) = machine.clockTicked(now: now, margin: margin, renewalLead: renewalLead, reminders: reminders)
            reminder = remind
            return state
        }
        if let reminder {
            logger.debug("session renewal due", metadata: ["broker.session": "\(session)"])
            broadcaster.remind(session: session, expiresAt: reminder)
        }
        return cache.peek(session)?.machine
    }

    /// How many timers the client runs for expiries and reminders (one at most, whatever
    /// the number of sessions), for tests.
    package var timerCount: Int { expiryTimer == nil ? 0 : 1 }

    // MARK: Per-session lock

    /// Waits for `session`'s lock, in arrival order; a caller whose task is cancelled while it
    /// waits stops waiting at once and gets ``FederationError/Code/cancelled`` (not holding it).
    func acquire(_ session: String) async throws(FederationError) {
        guard !locks.tryAcquire(session) else { return }
        let id = locks.newWaiterID()
        let acquired = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: SessionLockTable.Waiter) in
                locks.enqueue(session, id: id, continuation)
            }
        } onCancel: {
            Task { await self.withdrawWaiter(id, of: session) }
        }
        guard acquired else {
            throw FederationError(code: .cancelled, message: "cancelled while waiting for another call on session '\(session)' to finish")
        }
    }

    private func withdrawWaiter(_ id: UInt64, of session: String) {
        locks.withdraw(session, id: id)?.resume(returning: false)
    }

    func release(_ session: String) {
        locks.release(session)?.resume(returning: true)
    }
}
