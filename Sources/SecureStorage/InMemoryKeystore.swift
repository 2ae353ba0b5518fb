import Synchronization

/// A ``Keystore`` that keeps items in this process's memory only: nothing survives the
/// process, and only this instance's users see its changes.
///
/// What a `FederationClient` uses when it is given no keystore, and a fast, injectable
/// store for tests. It follows the protocol's semantics exactly (versioned writes, atomic
/// batches, a change feed), so code written against it behaves the same on
/// ``SQLiteKeystore``. Values are kept as given: there is no file to seal them for.
public final class InMemoryKeystore: Keystore, WriterFilteringKeystore {
    /// The service name this keystore reports.
    public let service: String
    /// The access group this keystore reports.
    public let accessGroup: AccessGroup

    private struct Item {
        var value: [UInt8]
        var version: Int64?
    }

    private struct Subscriber {
        var continuation: AsyncStream<KeystoreChange>.Continuation
        /// Changes committed by batches of this writer are not delivered.
        var excludedWriter: UInt64?
    }

    private struct State {
        var items: [String: Item] = [:]
        var subscribers: [Int: Subscriber] = [:]
        var nextSubscriber = 0
    }

    private let state = Mutex(State())

    /// An empty keystore.
    public init(service: String = "in-memory", accessGroup: AccessGroup = .none) {
        self.service = service
        self.accessGroup = accessGroup
    }

    deinit {
        let subscribers = state.withLock { Array($0.subscribers.values) }
        for subscriber in subscribers { subscriber.continuation.finish() }
    }

    /// The value under `key`, or `nil`.
    public func value(forKey key: String) async throws(KeystoreError) -> [UInt8]? {
        state.withLock { $0.items[key]?.value }
    }

    /// Every key, sorted.
    public func keys() async throws(KeystoreError) -> [String] {
        state.withLock { $0.items.keys.sorted() }
    }

    /// Applies `batch` atomically; a versioned set applies when nothing is stored, or the
    /// stored item has no version or one not greater than the new one.
    @discardableResult
    public func commit(_ batch: KeystoreBatch) async throws(KeystoreError) -> [Bool] {
        let (applied, subscribers) = state.withLock { state -> ([Bool], [Subscriber]) in
            var applied: [Bool] = []
            for operation in batch.operations {
                switch operation {
                case .set(let key, let value, let version):
                    if let stored = state.items[key], let storedVersion = stored.version, let version, storedVersion > version {
                        applied.append(false)
                    } else {
                        state.items[key] = Item(value: value, version: version)
                        applied.append(true)
                    }
                case .remove(let key):
                    applied.append(state.items.removeValue(forKey: key) != nil)
                }
            }
            return (applied, Array(state.subscribers.values))
        }
        for (operation, wasApplied) in zip(batch.operations, applied) where wasApplied {
            for subscriber in subscribers {
                if let excluded = subscriber.excludedWriter, excluded == batch.writer { continue }
                // A full buffer drops the oldest change: say that track was lost.
                if case .dropped = subscriber.continuation.yield(.item(operation.key)) { subscriber.continuation.yield(.all) }
            }
        }
        return applied
    }

    /// The keys this instance changes from now on.
    public func changes() -> AsyncStream<KeystoreChange> {
        subscribe(excludingWriter: nil)
    }

    package func changes(excludingWriter writer: UInt64) -> AsyncStream<KeystoreChange> {
        subscribe(excludingWriter: writer)
    }

    private func subscribe(excludingWriter writer: UInt64?) -> AsyncStream<KeystoreChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: KeystoreChange.self, bufferingPolicy: .bufferingNewest(4096))
        let id = state.withLock { state in
            state.nextSubscriber += 1
            state.subscribers[state.nextSubscriber] = Subscriber(continuation: continuation, excludedWriter: writer)
            return state.nextSubscriber
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }
}
