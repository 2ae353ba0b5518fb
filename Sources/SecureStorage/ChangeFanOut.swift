import Synchronization

/// The subscribers of one keystore's change feed, shared by every engine (in memory, SQLite,
/// PostgreSQL) so that buffering, overflow and shutdown behave the same whichever stores the
/// items; each engine keeps only how it learns of other processes' commits (its source).
///
/// Each subscriber's stream keeps the newest `bufferSize` changes. One that falls further
/// behind loses the oldest, so it is then sent ``KeystoreChange/all`` as well: a change may be
/// coalesced into "reload everything", never lost silently. The source (the SQLite poller, the
/// PostgreSQL listener) runs only while someone is subscribed: it is started under the same
/// lock that adds the first subscriber and stopped when the last one leaves or at ``close()``,
/// so a subscribe racing the last unsubscribe never finds a source that is about to stop.
package final class ChangeFanOut: Sendable {
    /// Stops a source; called once, outside the lock.
    package typealias StopSource = @Sendable () -> Void

    private struct Subscriber: Sendable {
        let continuation: AsyncStream<KeystoreChange>.Continuation
        /// This instance's commits made solely by batches of this writer are not delivered.
        let excludedWriter: UInt64?
    }

    private struct State: Sendable {
        var subscribers: [Int: Subscriber] = [:]
        var nextID = 0
        var stopSource: StopSource?
        var closed = false
    }

    private let bufferSize: Int
    private let state = Mutex(State())

    /// Subscribers that each buffer at most `bufferSize` changes.
    package init(bufferSize: Int) {
        self.bufferSize = bufferSize
    }

    /// A stream of the changes delivered from now on, without those of `writer`'s batches.
    ///
    /// - Parameter startSource: Called, under the lock, while no source runs (the first
    ///   subscriber, or the first since the last one left); returns how to stop the source it
    ///   started, or `nil` for an engine without one. After ``close()`` it is not called and the
    ///   stream is already finished.
    package func subscribe(
        excludingWriter writer: UInt64? = nil,
        startSource: () -> StopSource? = { nil }
    ) -> AsyncStream<KeystoreChange> {
        let (stream, continuation) = AsyncStream<KeystoreChange>.makeStream(bufferingPolicy: .bufferingNewest(bufferSize))
        let id = state.withLock { state -> Int? in
            guard !state.closed else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = Subscriber(continuation: continuation, excludedWriter: writer)
            if state.stopSource == nil { state.stopSource = startSource() }
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
        let stop = state.withLock { state -> StopSource? in
            state.subscribers[id] = nil
            guard state.subscribers.isEmpty else { return nil }
            defer { state.stopSource = nil }
            return state.stopSource
        }
        stop?()
    }

    /// Delivers `changes` to every subscriber.
    package func deliver(_ changes: [KeystoreChange]) {
        deliver(changes.map { (change: $0, writer: nil) })
    }

    /// Delivers each change to every subscriber but the one that excludes its writer.
    package func deliver(_ changes: [(change: KeystoreChange, writer: UInt64?)]) {
        guard !changes.isEmpty else { return }
        let subscribers = state.withLock { Array($0.subscribers.values) }
        for subscriber in subscribers {
            var dropped = false
            var last: KeystoreChange?
            for (change, writer) in changes {
                if let excluded = subscriber.excludedWriter, excluded == writer { continue }
                if case .dropped = subscriber.continuation.yield(change) { dropped = true }
                last = change
            }
            // The newest-keeping buffer always holds what was yielded last, so one `.all` after
            // the batch covers every change the batch pushed out.
            if dropped, last != .all { subscriber.continuation.yield(.all) }
        }
    }

    /// Ends every stream, stops the source and finishes the streams of later subscribers at
    /// once. Calling it again does nothing.
    package func close() {
        let (subscribers, stop) = state.withLock { state -> ([Subscriber], StopSource?) in
            state.closed = true
            defer {
                state.subscribers.removeAll()
                state.stopSource = nil
            }
            return (Array(state.subscribers.values), state.stopSource)
        }
        stop?()
        for subscriber in subscribers { subscriber.continuation.finish() }
    }
}
