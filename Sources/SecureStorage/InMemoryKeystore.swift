import Synchronization

/// A ``Keystore`` that keeps items in this process's memory only: nothing survives the
/// process, and only this instance's users see its changes.
///
/// What a `FederationClient` uses when it is given no keystore, and a fast, injectable
/// store for tests. It follows the protocol's semantics exactly (versioned writes, atomic
/// batches, a change feed) and refuses what the other engines refuse (an empty key, one
/// over 180 bytes or with a NUL, ``KeystoreError/Code/invalidName``; a value too large to seal,
/// ``KeystoreError/Code/valueTooLarge``), so code written against it behaves the same on
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

    private struct State {
        /// By the keys' bytes, as every engine tells keys apart (``ItemKey/Exact``).
        var items: [ItemKey.Exact: Item] = [:]
        var closed = false
    }

    private let state = Mutex(State())
    private let subscribers = ChangeFanOut(bufferSize: 4096)

    /// An empty keystore.
    public init(service: String = "in-memory", accessGroup: AccessGroup = .none) {
        self.service = service
        self.accessGroup = accessGroup
    }

    deinit { subscribers.close() }

    /// Ends every ``changes()`` stream and forgets the items; later calls fail with
    /// ``KeystoreError/Code/storeUnavailable``.
    public func close() {
        state.withLock { state in
            state.closed = true
            state.items = [:]
        }
        subscribers.close()
    }

    /// The value under `key`, or `nil`.
    ///
    /// - Throws: ``KeystoreError/Code/invalidName`` for a key no engine accepts;
    ///   ``KeystoreError/Code/storeUnavailable`` once closed.
    public func value(forKey key: String) async throws(KeystoreError) -> [UInt8]? {
        try NameRules.validate(key: key)
        return try state.withLock { (state) throws(KeystoreError) in
            try Self.checkOpen(state)
            return state.items[ItemKey.Exact(key)]?.value
        }
    }

    /// Every key, sorted.
    ///
    /// - Throws: ``KeystoreError/Code/storeUnavailable`` once closed.
    public func keys() async throws(KeystoreError) -> [String] {
        try state.withLock { (state) throws(KeystoreError) in
            try Self.checkOpen(state)
            return state.items.keys.map(\.key).sorted()
        }
    }

    private static func checkOpen(_ state: State) throws(KeystoreError) {
        guard !state.closed else { throw KeystoreError(.storeUnavailable, "the keystore is closed") }
    }

    /// Applies `batch` atomically; a versioned set applies when nothing is stored, or the
    /// stored item has no version or one not greater than the new one.
    ///
    /// - Throws: ``KeystoreError/Code/invalidName`` or ``KeystoreError/Code/valueTooLarge``
    ///   for an operation no engine accepts, before anything is applied;
    ///   ``KeystoreError/Code/storeUnavailable`` once closed.
    @discardableResult
    public func commit(_ batch: KeystoreBatch) async throws(KeystoreError) -> [Bool] {
        for operation in batch.operations {
            try NameRules.validate(key: operation.key)
            if case .set(_, let value, _) = operation { try Sealing.requireSealable(count: value.count) }
        }
        let applied = try state.withLock { (state) throws(KeystoreError) -> [Bool] in
            try Self.checkOpen(state)
            var applied: [Bool] = []
            for operation in batch.operations {
                switch operation {
                case .set(let key, let value, let version):
                    if let stored = state.items[ItemKey.Exact(key)], let storedVersion = stored.version, let version, storedVersion > version {
                        applied.append(false)
                    } else {
                        state.items[ItemKey.Exact(key)] = Item(value: value, version: version)
                        applied.append(true)
                    }
                case .remove(let key):
                    applied.append(state.items.removeValue(forKey: ItemKey.Exact(key)) != nil)
                }
            }
            return applied
        }
        let changed = zip(batch.operations, applied).filter { $0.1 }.map { operation, _ in operation.key }
        subscribers.deliver(changed.map { (change: .item($0), writer: batch.writer) })
        return applied
    }

    /// The keys this instance changes from now on.
    public func changes() -> AsyncStream<KeystoreChange> {
        subscribers.subscribe()
    }

    package func changes(excludingWriter writer: UInt64) -> AsyncStream<KeystoreChange> {
        subscribers.subscribe(excludingWriter: writer)
    }
}
