#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
import Logging

/// Graceful shutdown: no new federations, in-flight ones finish (or are cancelled at the
/// deadline), timers and the change feed stop, the transport thread stops.
extension FederationClient {
    /// Shuts the client down for a process that is stopping (swift-service-lifecycle's
    /// graceful shutdown calls this through the `FederationLifecycle` module's `Service`
    /// conformance).
    ///
    /// 1. New federations fail with ``FederationError/Code/cancelled``; reads keep working.
    /// 2. Federations in flight may finish, including their commit, for up to `gracePeriod`;
    ///    the rest are cancelled (their sessions stay as they were). Their callers' tasks
    ///    are not cancelled: each fails with ``FederationError/Code/cancelled``. A keystore
    ///    call already under way at the deadline is not interrupted; it ends by itself or by
    ///    the keystore's own timeout (the PostgreSQL keystore's `operationTimeout`).
    /// 3. The expiry and reminder timer and the change feed stop; clears under way may
    ///    finish (for up to `gracePeriod` more); every stream ends.
    ///    Re-reads of sessions the client runs on its own (after the feed reported a
    ///    change, or in the background) are cancelled, and shutdown waits for them to end.
    /// 4. The client's libcurl driver thread stops and its connections close.
    ///
    /// Once it returns, the client calls the keystore only for its callers' calls (a read of
    /// a session not cached yet, ``sessionNames()``, ``clear(session:)``), so the caller
    /// may close the keystore. Calling it again waits for the first call to finish. The
    /// keystore is the caller's and stays open.
    public func shutdown(gracePeriod: Duration = .seconds(10)) async {
        guard !shutdownBegan else {
            if !shutdownEnded { await withCheckedContinuation { shutdownCompletionWaiters.add($0) } }
            return
        }
        shutdownBegan = true
        logger.debug("client shutting down", metadata: ["broker.inFlight": "\(federationsInFlight)"])
        expiryTimer?.cancel()
        expiryTimer = nil
        changeFeed?.cancel()
        reloadOfEverything?.cancel()
        for reload in backgroundReloads.values { reload.cancel() }

        if federationsInFlight > 0 {
            await waitForTheLast(.federation, atMost: gracePeriod)
        }
        await storeWorkOfItsOwnEnded()
        if let transport = ownedTransport {
            // Joining the driver thread can wait for libcurl to let a resolver thread go (one
            // before 7.87 joins it: tens of seconds against a DNS server that drops queries),
            // so it waits on a thread of its own, not one of the few the cooperative pool has.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                DispatchQueue.global().async {
                    transport.shutdown()
                    continuation.resume()
                }
            }
        }
        // Clears under way (a commit, no network) may end before the streams do, so that their
        // observers hear of them; for the grace period at most, as a keystore that does not
        // answer, or clears that keep coming, must not hold shutdown.
        if clearsInFlight > 0 {
            await waitForTheLast(.clear, atMost: gracePeriod)
        }
        broadcaster.finishAll()
        shutdownEnded = true
        shutdownCompletionWaiters.resumeAll()
        logger.debug("client shut down")
    }

    /// Waits for the change feed's task and every re-read the client started (all
    /// cancelled): none starts any more, so the keystore is left to its callers.
    private func storeWorkOfItsOwnEnded() async {
        await changeFeed?.value
        await reloadOfEverything?.value
        // A re-read that ends removes itself; none is added once shutdown began.
        while let reload = backgroundReloads.values.first {
            await reload.value
            backgroundReloads = backgroundReloads.filter { $0.value != reload }
        }
    }

    /// Whether ``shutdown(gracePeriod:)`` was called.
    public var isShuttingDown: Bool { shutdownBegan }

    /// Runs one federation's network and commit work in the caller's task, counted so that
    /// shutdown can wait for it.
    ///
    /// The caller's cancellation cancels it, as any awaited call. Shutdown past its grace
    /// period fires ``shutdownSignal`` instead, which ends the federation's transfers and
    /// retry waits with `CancellationError` while the caller's task stays uncancelled; a
    /// federation that had not started its network calls then fails as cancelled too.
    /// (Running the federation as a task of its own would give shutdown a task to cancel,
    /// but costs two hand-offs between threads per federation: see ``CancellationSignal``.)
    func tracked<Output: Sendable>(
        _ body: @Sendable () async -> Result<Output, FederationError>
    ) async throws(FederationError) -> Output {
        guard !shutdownBegan else {
            throw FederationError(code: .cancelled, message: "the client is shutting down; no new federation starts")
        }
        federationsInFlight += 1
        let result = await body()
        federationsInFlight -= 1
        if federationsInFlight == 0 { shutdownWaiters.resumeAll() }
        return try result.get()
    }

    /// Counts a clear out, and lets a shutdown waiting for the last one go on.
    func clearEnded() {
        clearsInFlight -= 1
        if clearsInFlight == 0 { clearWaiters.resumeAll() }
    }

    /// What shutdown waits for the last of.
    private enum CallInFlight { case federation, clear }

    /// Waits until the last call of `kind` in flight has ended, or `gracePeriod` has passed:
    /// then federations are cancelled (and end soon), and shutdown stops waiting for clears.
    private func waitForTheLast(_ kind: CallInFlight, atMost gracePeriod: Duration) async {
        let gracePeriod = shutdownGraceCut ? .zero : gracePeriod
        let deadline = Task { [weak self] in
            try? await Task.sleep(for: gracePeriod)
            guard !Task.isCancelled else { return }
            await self?.gracePeriodEnded(for: kind)
        }
        await withCheckedContinuation { waiter in
            switch kind {
            case .federation: shutdownWaiters.add(waiter)
            case .clear: clearWaiters.add(waiter)
            }
        }
        deadline.cancel()
    }

    /// Ends shutdown's grace period now, whether shutdown has begun or not: federations in
    /// flight are cancelled as at its deadline, and clears are no longer waited for. What a
    /// service group's cancellation does to a shutdown it had begun gracefully.
    package func cutShutdownGracePeriod() {
        shutdownGraceCut = true
        cancelFederationsInFlight()
        clearWaiters.resumeAll()
    }

    private func gracePeriodEnded(for kind: CallInFlight) {
        switch kind {
        case .federation: cancelFederationsInFlight()
        case .clear: clearWaiters.resumeAll()
        }
    }

    private func cancelFederationsInFlight() {
        guard federationsInFlight > 0 else { return }
        logger.debug("cancelling federations past the shutdown grace period", metadata: ["broker.inFlight": "\(federationsInFlight)"])
        shutdownSignal.fire()
    }
}
