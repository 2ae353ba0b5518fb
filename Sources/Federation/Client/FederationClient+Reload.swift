import Logging
import SecureStorage

/// Re-reading sessions the cache may hold wrongly: after a change the feed reported, after
/// a re-read that failed, and after a write whose outcome is unknown.
///
/// A write that timed out or lost its connection may still land in the store, later than
/// its caller was told it failed (a PostgreSQL statement queued behind another group runs for
/// up to its own timeout once it starts), and the client's own commits never come back
/// through its feed. So for the keystore's `uncertainCommitWindow` after such a write, reads
/// of the session keep re-reading it (in the background, at most every
/// ``reloadRetryInterval``), and a read that began before the failure is dropped.
extension FederationClient {
    /// How long after a failed re-read reads answer from the cache before trying again.
    static let reloadRetryInterval: Duration = .milliseconds(200)
    /// How long after a failed re-read of an observed session the client tries again by
    /// itself (longer: nobody waits on it, and a store that is away would otherwise take a
    /// read per observed session five times a second).
    static let observedReloadRetryInterval: Duration = .seconds(1)
    /// The longest wait between two such tries while the store stays unreadable.
    static let observedReloadRetryLimit: Duration = .seconds(30)

    /// The wait before the next try after `failures` failed ones in a row: twice as long
    /// after each, from ``observedReloadRetryInterval`` to ``observedReloadRetryLimit``.
    static func retryDelay(afterFailures failures: Int) -> Duration {
        min(observedReloadRetryInterval * (1 << min(failures - 1, 5)), observedReloadRetryLimit)
    }

    /// Reads `session` from the store and applies it, unless a local change raced the read.
    /// When the read fails, or the session is within a write's uncertain window, a later
    /// read re-reads it.
    ///
    /// One re-read of a session at a time: one asked for while another runs returns at once,
    /// and the running one, once done, starts one more in a task of its own (not in its
    /// caller's: the feed loop or a re-read of everything must not be held up by asks that
    /// keep coming). Two re-reads side by side (a feed event's and a re-read of everything's,
    /// say) could apply their answers in the other order, the older last, and the newer
    /// one's was then dropped as raced.
    func reload(_ session: String) async {
        guard claimReload(of: session) else { return }
        await runClaimedReload(of: session)
    }

    /// Whether the caller may re-read `session` now; if one is running or about to, it is
    /// asked to read again, and the caller may not.
    private func claimReload(of session: String) -> Bool {
        guard reloadsAskedAgain[session] == nil else {
            reloadsAskedAgain[session] = true
            return false
        }
        reloadsAskedAgain[session] = false
        return true
    }

    /// Re-reads a claimed session once, then hands an ask that came meanwhile to a task.
    private func runClaimedReload(of session: String) async {
        await reloadOnce(session)
        if reloadsAskedAgain.removeValue(forKey: session) == true { reloadInTheBackground(session) }
    }

    private func reloadOnce(_ session: String) async {
        // Evicted since the re-read was asked for, and followed by nobody: nothing to bring up
        // to date, and a change the feed reported meanwhile would have been dropped.
        guard isFollowed(session) else {
            failedRetries[session] = nil
            return
        }
        let started = ContinuousClock.now
        do {
            // Applied even when the feed reported a change meanwhile: that change asked for
            // another re-read, which runs after this one (one at a time per session), or, for
            // `.all`, the next re-read of everything reads it. Dropping it instead would let a
            // stream of changes (a flood of `.all`) keep the session from ever being updated.
            let applied = try await loadAndApply(session, droppingRaced: false, announcingAbsence: true)
            failedRetries[session] = nil
            if applied {
                // A write that may land until `uncertainUntil` could have landed after this read
                // began: the window ends with a read that began after it.
                _ = cache.update(session) { $0.reloadAfter = Self.nextReload(whileUncertain: &$0.uncertainUntil, readSince: started) }
            } else if isFollowed(session) {
                // Dropped for a local write, an eviction or a write whose outcome is unknown,
                // none of which asks for a re-read of its own: the running re-read reads again
                // once done. Each drop needs one of those, so this does not repeat by itself.
                reloadsAskedAgain[session] = true
            }
        } catch {
            logger.debug("changed session unreadable", metadata: ["broker.session": "\(session)", "broker.error": "\(error.code)"])
            _ = cache.update(session) { $0.reloadAfter = .now.advanced(by: Self.reloadRetryInterval) }
            // Nobody may read it soon: an observer would keep the state from before the
            // change until something else changed it.
            if broadcaster.isObserved(session) { retryReload(of: session) }
        }
    }

    /// Reads `session` from the store and applies what it read; `false` when something
    /// raced the read and it was dropped: a local federation or clear committed meanwhile
    /// (the cached entry's generation changed, or it was evicted), or the feed reported a
    /// change of a session nobody follows any more (nothing would read it again), or, with
    /// `droppingRaced`, of any session: a read outside the one-at-a-time re-reads may hold
    /// what the change replaced and land after that change's own re-read.
    ///
    /// With `announcingAbsence`, a session read as absent that was not cached is announced
    /// `notFederated` to observers of every session: a re-read of one comes from the feed
    /// (another client removed it), and an entry made from nothing would announce nothing.
    /// Without `announcingNew`, a session that was not cached is cached as a first read
    /// caches it, announced to nobody (a read that reports no change: the credential
    /// server's).
    func loadAndApply(
        _ session: String, droppingRaced: Bool, announcingAbsence: Bool = false, announcingNew: Bool = true
    ) async throws(FederationError) -> Bool {
        let generation = cache.peek(session)?.generation
        let began = callsInFlight.begin(session)
        let record: SessionRecord?
        do throws(FederationError) {
            record = try await store.load(session)
        } catch {
            _ = callsInFlight.end(session, began: began)
            throw error
        }
        let raced = callsInFlight.end(session, began: began)
        guard cache.peek(session)?.generation == generation,
              !raced || (!droppingRaced && (generation != nil || isFollowed(session)))
        else { return false }
        if generation == nil, !announcingNew {
            cacheFirstRead(session, record)
            return true
        }
        apply(session) { machine, now, margin in machine.stored(record, now: now, margin: margin) }
        if announcingAbsence, generation == nil, record == nil, broadcaster.hasObserversOfAll {
            broadcaster.publish(.notFederated, session: session)
        }
        return true
    }

    /// Runs `write`, a commit of `session` by this client (with any read that goes with
    /// it), and says whether the feed reported another client's change of the session, or
    /// of every session, while it ran.
    ///
    /// Such a change may come before or after this client's in the store, and its re-read
    /// may already have applied, or have been dropped as outdated by this client's write:
    /// the caller applies its write, then ``rereadIfRaced(_:raced:)`` reads the session again.
    func recordingFeedChanges<Value>(
        _ session: String, _ write: () async throws(FederationError) -> Value
    ) async throws(FederationError) -> (value: Value, raced: Bool) {
        let began = callsInFlight.begin(session)
        do {
            let value = try await write()
            return (value, callsInFlight.end(session, began: began))
        } catch {
            _ = callsInFlight.end(session, began: began)
            throw error
        }
    }

    /// After a write of `session` was applied here: re-reads the session when the write
    /// raced another client's change (see ``recordingFeedChanges(_:_:)``) or its outcome in the
    /// store could not be read.
    func rereadIfRaced(_ session: String, raced: Bool) {
        if raced { reloadInTheBackground(session) }
    }

    /// Re-reads an observed session whose re-read failed, a while later (twice as long
    /// after each failure in a row, at most ``observedReloadRetryLimit``), once at a time.
    func retryReload(of session: String) {
        guard !shutdownBegan, reloadRetries.insert(session).inserted else { return }
        let failures = (failedRetries[session] ?? 0) + 1
        failedRetries[session] = failures
        // The client is not held while the retry waits: one the caller let go of during an
        // outage is released (and its streams end) rather than kept by its own retries.
        inBackground(after: Self.retryDelay(afterFailures: failures)) { client in client.retryDue(session) }
    }

    private func retryDue(_ session: String) {
        reloadRetries.remove(session)
        // Observed no more: nobody waits for it, and the next read re-reads it.
        guard broadcaster.isObserved(session) else {
            failedRetries[session] = nil
            return
        }
        reloadInTheBackground(session)
    }

    /// When the next re-read is due: soon while `uncertainUntil` lies ahead of `readSince`
    /// (what the entry holds was read then; now for a local write), else never (and the
    /// window is forgotten).
    static func nextReload(
        whileUncertain uncertainUntil: inout ContinuousClock.Instant?, readSince: ContinuousClock.Instant = .now
    ) -> ContinuousClock.Instant? {
        guard let until = uncertainUntil, until > readSince else {
            uncertainUntil = nil
            return nil
        }
        return .now.advanced(by: reloadRetryInterval)
    }

    /// A write of `session` failed with its outcome unknown: reads in flight are dropped or
    /// read again, and reads re-read it until the uncertain window ends.
    func markWriteUncertain(_ session: String) {
        let until = ContinuousClock.now.advanced(by: store.keystore.uncertainCommitWindow)
        callsInFlight.changed(session)
        guard cache.peek(session) != nil else {
            // Not cached: the first read that caches it takes the window over.
            keepUncertainWindow(of: session, until: until)
            return
        }
        let generation = newGeneration()
        _ = cache.update(session) { entry in
            entry.generation = generation
            entry.uncertainUntil = until
            entry.reloadAfter = .now
        }
    }

    /// Keeps the uncertain window of a session that is not cached (never cached since the
    /// write failed, or evicted since) for the first read that caches it.
    func keepUncertainWindow(of session: String, until: ContinuousClock.Instant) {
        let now = ContinuousClock.now
        guard until > now else { return }
        // Swept when the count doubles, so that evictions during an outage with many such
        // windows do not each scan them all.
        if uncertainWrites.count >= uncertainWritesSweepAt {
            uncertainWrites = uncertainWrites.filter { $0.value > now }
            uncertainWritesSweepAt = max(64, uncertainWrites.count * 2)
        }
        uncertainWrites[session] = until
    }

    /// Gives a session being cached the uncertain window of a failed write made while it
    /// was not cached.
    func takeUncertainWrite(of session: String, into entry: inout CachedSession) {
        guard let until = uncertainWrites.removeValue(forKey: session), until > .now else { return }
        entry.uncertainUntil = until
        entry.reloadAfter = .now
    }

    /// Re-reads `session` in a task of its own, so that a store that hangs never holds up a
    /// read the cache can answer. Claimed here, before the task starts: asks meanwhile start
    /// no task of their own (see ``reload(_:)``). None starts once shutdown began, which
    /// cancels and waits for those running.
    func reloadInTheBackground(_ session: String) {
        guard !shutdownBegan, claimReload(of: session) else { return }
        inBackground { client in await client.runClaimedReload(of: session) }
    }

    /// Runs `work` in a task of its own, after `delay` (during which the client is not held),
    /// which shutdown cancels and waits for.
    func inBackground(after delay: Duration = .zero, _ work: @escaping @Sendable (isolated FederationClient) async -> Void) {
        // Once shutdown began, none starts: it may already have waited for those running, and
        // the keystore is its caller's to close once shutdown returns.
        guard !shutdownBegan else { return }
        let id = nextBackgroundReload
        nextBackgroundReload &+= 1
        // Registered before the task can end: its removal runs on this actor, after this call.
        backgroundReloads[id] = Task { [weak self] in
            if delay > .zero { try? await Task.sleep(for: delay) }
            await self?.runInBackground(work, id)
        }
    }

    private func runInBackground(_ work: @Sendable (isolated FederationClient) async -> Void, _ id: UInt64) async {
        await work(self)
        backgroundReloads[id] = nil
    }
}
