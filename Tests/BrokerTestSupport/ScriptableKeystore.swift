package import SecureStorage
import Synchronization

/// A ``Keystore`` wrapper for tests: counts reads (in all and per key) and writes, can make the store
/// unreachable (every call fails with `storeUnavailable`) or fail only writes, and can hold a read
/// after it has read (``holdNextRead(ofKey:)``), or a commit after it applied
/// (``holdNextCommit()``), so that a test can change the store meanwhile.
package final class ScriptableKeystore: Keystore, WriterFilteringKeystore {
    package struct Counts: Sendable, Equatable {
        package var reads = 0
        package var lists = 0
        package var commits = 0
        /// Reads of each key.
        package var readsByKey: [String: Int] = [:]
        /// The most reads that were in flight at once.
        package var mostConcurrentReads = 0

        package init() {}

        /// How often `key` was read.
        package func reads(of key: String) -> Int { readsByKey[key, default: 0] }
    }

    /// A call held after it has read or committed: ``arrived()`` returns once it has,
    /// ``release()`` lets it return.
    package final class CallGate: Sendable {
        private let arrivals: AsyncStream<Void>
        private let arrival: AsyncStream<Void>.Continuation
        private let releases: AsyncStream<Void>
        private let releasing: AsyncStream<Void>.Continuation

        init() {
            (arrivals, arrival) = AsyncStream.makeStream(of: Void.self)
            (releases, releasing) = AsyncStream.makeStream(of: Void.self)
        }

        /// Waits until the held call has read or committed, at most `timeout`; `false` when
        /// it has not by then (a test then fails rather than hangs).
        @discardableResult
        package func arrived(timeout: Duration = .seconds(10)) async -> Bool {
            let arrivals = self.arrivals
            return await withTaskGroup(of: Bool.self) { group in
                group.addTask {
                    var iterator = arrivals.makeAsyncIterator()
                    _ = await iterator.next()
                    return !Task.isCancelled
                }
                group.addTask {
                    try? await Task.sleep(for: timeout)
                    return false
                }
                let first = await group.next() ?? false
                group.cancelAll()
                return first
            }
        }

        /// Lets the held call return.
        package func release() { releasing.finish() }

        fileprivate func hold() async {
            arrival.finish()
            for await _ in releases {}
        }
    }

    private struct State {
        var counts = Counts()
        var unreachable = false
        var failWrites = false
        var failAfterWrites = false
        var applyLate: Duration?
        var readDelay: Duration?
        var readsInFlight = 0
        var dropsStoreChanges = false
        var uncertainCommitWindow: Duration?
        var gates: [String: CallGate] = [:]
        var commitGate: CallGate?
        var commitGateBeforeApplying: CallGate?
    }

    private let base: any Keystore
    private let state = Mutex(State())
    private let injected = ChangeFanOut(bufferSize: 4096)

    package init(wrapping base: any Keystore) { self.base = base }

    package var service: String { base.service }
    package var accessGroup: AccessGroup { base.accessGroup }

    package func close() async { await base.close() }

    /// What was asked of the store so far.
    package var counts: Counts { state.withLock { $0.counts } }

    /// Reads under way now.
    package var readsInFlight: Int { state.withLock { $0.readsInFlight } }

    /// Makes every call fail (`true`) or pass through (`false`).
    package func setUnreachable(_ value: Bool) { state.withLock { $0.unreachable = value } }

    /// Makes commits fail while reads pass.
    package func setFailWrites(_ value: Bool) { state.withLock { $0.failWrites = value } }

    /// Makes commits apply, then fail as if the answer was lost (the outcome unknown to the caller).
    package func setFailAfterWrites(_ value: Bool) { state.withLock { $0.failAfterWrites = value } }

    /// Makes commits fail at once and apply `delay` later, as a statement queued on a server
    /// that outlives its caller's timeout would (`nil`: commits as usual).
    package func setApplyLate(_ delay: Duration?) { state.withLock { $0.applyLate = delay } }

    /// Reports `window` as the store's ``Keystore/uncertainCommitWindow`` (`nil`: the wrapped
    /// keystore's).
    package func setUncertainCommitWindow(_ window: Duration?) { state.withLock { $0.uncertainCommitWindow = window } }

    package var uncertainCommitWindow: Duration {
        state.withLock { $0.uncertainCommitWindow } ?? base.uncertainCommitWindow
    }

    /// Makes every read take `delay` longer (`nil`: as the wrapped keystore takes).
    package func setReadDelay(_ delay: Duration?) { state.withLock { $0.readDelay = delay } }

    /// Makes the change streams drop what the wrapped store's feed reports (`true`), as a
    /// feed that lost its connection would; injected changes still arrive.
    package func setDropsStoreChanges(_ value: Bool) { state.withLock { $0.dropsStoreChanges = value } }

    /// Holds the next read of `key` once it has read the store, until the gate is released.
    package func holdNextRead(ofKey key: String) -> CallGate {
        let gate = CallGate()
        state.withLock { $0.gates[key] = gate }
        return gate
    }

    /// Holds the next commit once it has applied, until the gate is released.
    package func holdNextCommit() -> CallGate {
        let gate = CallGate()
        state.withLock { $0.commitGate = gate }
        return gate
    }

    /// Holds the next commit before it applies, until the gate is released: what another
    /// client commits meanwhile is in the store first.
    package func holdNextCommitBeforeApplying() -> CallGate {
        let gate = CallGate()
        state.withLock { $0.commitGateBeforeApplying = gate }
        return gate
    }

    private func check(write: Bool) throws(KeystoreError) {
        let (unreachable, failWrites) = state.withLock { ($0.unreachable, $0.failWrites) }
        if unreachable || (write && failWrites) {
            throw KeystoreError(.storeUnavailable, "the test made the store unreachable")
        }
    }

    package func value(forKey key: String) async throws(KeystoreError) -> [UInt8]? {
        let delay = state.withLock { state -> Duration? in
            state.counts.reads += 1
            state.counts.readsByKey[key, default: 0] += 1
            state.readsInFlight += 1
            state.counts.mostConcurrentReads = max(state.counts.mostConcurrentReads, state.readsInFlight)
            return state.readDelay
        }
        defer { state.withLock { $0.readsInFlight -= 1 } }
        try check(write: false)
        if let delay { try? await Task.sleep(for: delay) }
        let value = try await base.value(forKey: key)
        if let gate = state.withLock({ $0.gates.removeValue(forKey: key) }) { await gate.hold() }
        return value
    }

    package func keys() async throws(KeystoreError) -> [String] {
        state.withLock { $0.counts.lists += 1 }
        try check(write: false)
        return try await base.keys()
    }

    package func commit(_ batch: KeystoreBatch) async throws(KeystoreError) -> [Bool] {
        state.withLock { $0.counts.commits += 1 }
        try check(write: true)
        if let delay = state.withLock({ $0.applyLate }) {
            let base = self.base
            Task {
                try? await Task.sleep(for: delay)
                _ = try? await base.commit(batch)
            }
            throw KeystoreError(.storeUnavailable, "the test timed the commit out; it applies later")
        }
        if let gate = state.withLock({ state in defer { state.commitGateBeforeApplying = nil }; return state.commitGateBeforeApplying }) {
            await gate.hold()
        }
        let applied = try await base.commit(batch)
        if let gate = state.withLock({ state in defer { state.commitGate = nil }; return state.commitGate }) { await gate.hold() }
        if state.withLock({ $0.failAfterWrites }) {
            throw KeystoreError(.storeUnavailable, "the test lost the answer of a commit that applied")
        }
        return applied
    }

    /// Delivers `change` to every change stream, as the store's feed would (`.all` after a
    /// reconnect, or from anyone who may `NOTIFY` on a PostgreSQL database).
    package func inject(_ change: KeystoreChange) { injected.deliver([change]) }

    package func changes() -> AsyncStream<KeystoreChange> { merged(base.changes()) }
    package func changes(excludingWriter writer: UInt64) -> AsyncStream<KeystoreChange> {
        merged((base as? any WriterFilteringKeystore)?.changes(excludingWriter: writer) ?? base.changes())
    }

    /// `stream`'s changes and the injected ones; ends when `stream` does.
    private func merged(_ stream: AsyncStream<KeystoreChange>) -> AsyncStream<KeystoreChange> {
        let extra = injected.subscribe()
        return AsyncStream(bufferingPolicy: .bufferingNewest(4096)) { continuation in
            // As the engines do: a subscriber that fell behind is told every item may have
            // changed, never left to miss changes silently.
            let send = { @Sendable (change: KeystoreChange) in
                if case .dropped = continuation.yield(change) { continuation.yield(.all) }
            }
            let forwarding = Task { [self] in
                for await change in stream where !self.state.withLock({ $0.dropsStoreChanges }) { send(change) }
                continuation.finish()
            }
            let forwardingInjected = Task {
                for await change in extra { send(change) }
            }
            continuation.onTermination = { _ in
                forwarding.cancel()
                forwardingInjected.cancel()
            }
        }
    }
}
