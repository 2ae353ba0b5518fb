/// A blocking store of small secret items, each named by a string key.
///
/// `SynchronousKeystore` is the interface of the file-per-item ``FileKeystore``, kept while
/// `Federation` moves to the asynchronous ``Keystore``. Implementations must be safe to use
/// from many threads and tasks at once.
///
/// Absence is not an error when reading: ``data(forKey:)`` returns `nil` for a missing item and
/// ``remove(forKey:)`` succeeds when there is nothing to remove. Use ``requireData(forKey:)``
/// to get a ``KeystoreError/Code/itemNotFound`` error instead.
public protocol SynchronousKeystore: Sendable {
    /// Returns the value stored under `key`, or `nil` when there is none.
    ///
    /// - Throws: ``KeystoreError`` when the item exists but cannot be read or opened, for example
    ///   ``KeystoreError/Code/authenticationFailed`` when it was tampered with.
    func data(forKey key: String) throws -> [UInt8]?

    /// Stores `value` under `key`, replacing any previous value atomically and durably.
    func set(_ value: [UInt8], forKey key: String) throws

    /// Removes the item stored under `key`, durably. Removing a missing item succeeds.
    func remove(forKey key: String) throws

    /// Removes every item of this keystore's namespace, durably.
    func removeAll() throws

    /// The keys of every item in this keystore's namespace, sorted.
    func keys() throws -> [String]
}

extension SynchronousKeystore {
    /// Returns the value stored under `key`.
    ///
    /// - Throws: ``KeystoreError`` with ``KeystoreError/Code/itemNotFound`` when there is no such
    ///   item, or any error ``data(forKey:)`` throws.
    public func requireData(forKey key: String) throws -> [UInt8] {
        guard let value = try data(forKey: key) else {
            throw KeystoreError(.itemNotFound, "no item under this key")
        }
        return value
    }
}
