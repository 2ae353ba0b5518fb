#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SecureStorage

/// A session as the cache holds it: its state machine, and a generation that changes
/// with every change applied here, so a store read that raced with a local change is
/// recognised and dropped.
struct CachedSession: Sendable {
    var machine: SessionStateMachine
    var generation: UInt64
}

/// The cache over the store: first reads, applying changes, the change feed, expiry
/// announcements and the per-session lock.
extension FederationClient {
    // MARK: Reading through the cache

    /// The cached session, or the store's record once read (and cached).
    func cachedOrLoaded(_ session: String) async throws(FederationError) -> SessionStateMachine {
        startChangeFeed()
        if let cached = cache.get(session) { return cached.machine }
        let record = try await store.load(session)
        // A federation, clear or feed update may have filled the entry while this read waited.
        if let cached = cache.get(session) { return cached.machine }
        let machine = SessionStateMachine(record: record, now: now(), margin: expiryMargin)
        insert(session, machine)
        return machine
    }

    func snapshot(_ name: String, _ machine: SessionStateMachine) -> SessionSnapshot {
        let state = machine.state(now: now(), margin: expiryMargin)
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
    func apply(_ session: String, _ transition: (inout SessionStateMachine, Date, Duration) -> SessionState?) {
        let current = now()
        var entry = cache.peek(session) ?? CachedSession(machine: SessionStateMachine(record: nil, now: current, margin: expiryMargin), generation: 0)
        let announced = transition(&entry.machine, current, expiryMargin)
        nextGeneration += 1
        entry.generation = nextGeneration
        cache.set(session, entry, isPinned: isPinned)
        if let announced { publish(announced, session: session) }
        scheduleExpiry(of: session, entry.machine)
    }

    private func insert(_ session: String, _ machine: SessionStateMachine) {
        nextGeneration += 1
        cache.set(session, CachedSession(machine: machine, generation: nextGeneration), isPinned: isPinned)
        scheduleExpiry(of: session, machine)
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
        guard changeFeed == nil else { return }
        // Our own commits are left out: this client applied each of them itself.
        let changes = store.changesByOthers()
        changeFeed = Task { [weak self] in
            for await change in changes {
                guard let self else { return }
                await self.storeChanged(change)
            }
        }
    }

    private func storeChanged(_ change: KeystoreChange) async {
        switch change {
        case .item(let key):
            guard let session = SessionStore.session(forKey: key), isFollowed(session) else { return }
            await reload(session)
        case .all:
            for session in Set(cache.keys).union(broadcaster.observedSessions()) {
                await reload(session)
            }
        }
    }

    /// Whether a change of `session` by another client matters here.
    private func isFollowed(_ session: String) -> Bool {
        cache.peek(session) != nil || broadcaster.isObserved(session) || broadcaster.hasObserversOfAll
    }

    /// Reads `session` from the store and applies it, unless a local change raced the read.
    private func reload(_ session: String) async {
        let generation = cache.peek(session)?.generation
        let record: SessionRecord?
        do {
            record = try await store.load(session)
        } catch {
            logger.debug("changed session unreadable", metadata: ["broker.session": "\(session)", "broker.error": "\(error.code)"])
            return
        }
        guard cache.peek(session)?.generation == generation else { return }
        apply(session) { machine, now, margin in machine.stored(record, now: now, margin: margin) }
    }

    // MARK: Expiry

    /// Makes sure `session`'s expiry is announced; one timer serves every session.
    private func scheduleExpiry(of session: String, _ machine: SessionStateMachine) {
        guard let due = machine.expiryDue(margin: expiryMargin), due > now() else { return }
        expirySchedule.schedule(session, at: due)
        if let armed = expiryTimerDue, armed <= due, expiryTimer != nil { return }
        armExpiryTimer(due: due)
    }

    private func armExpiryTimer(due: Date) {
        expiryTimer?.cancel()
        expiryTimerDue = due
        // Clamped: a due time far away (a negative margin, say) must not overflow the conversion.
        let delay = min(max(0, due.timeIntervalSince(now())), 1e9)
        expiryTimer = Task { [weak self] in
            do {
                try await Task.sleep(for: .milliseconds(Int64(delay * 1000) + 5))
            } catch {
                return
            }
            await self?.expiryTimerFired()
        }
    }

    private func expiryTimerFired() {
        expiryTimer = nil
        expiryTimerDue = nil
        announceDueExpiries()
    }

    /// Announces the expiry of every cached session now due, and re-arms the timer for the
    /// next one. Run when the timer fires and when someone subscribes (the clock may have
    /// moved past a due time before the timer's sleep ends).
    func announceDueExpiries() {
        let current = now()
        for entry in expirySchedule.popDue(now: current) where cache.peek(entry.session) != nil {
            apply(entry.session) { machine, now, margin in machine.clockTicked(now: now, margin: margin) }
        }
        if let next = expirySchedule.next, expiryTimer == nil || expiryTimerDue.map({ next < $0 }) ?? true {
            armExpiryTimer(due: next)
        }
    }

    // MARK: Per-session lock

    func acquire(_ session: String) async {
        guard !locks.tryAcquire(session) else { return }
        await withCheckedContinuation { continuation in
            locks.enqueue(session, continuation)
        }
    }

    func release(_ session: String) {
        locks.release(session)?.resume()
    }
}
