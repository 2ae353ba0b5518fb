extension Keystore {
    /// Stores `value` under `key`, unversioned: it always replaces what is there.
    public func set(_ value: [UInt8], forKey key: String) async throws(KeystoreError) {
        var batch = KeystoreBatch()
        batch.set(value, forKey: key)
        try await commit(batch)
    }

    /// Stores `value` under `key` unless the stored item carries a newer version.
    ///
    /// Concurrent writers converge this way: the write applies when there is no item, or the
    /// stored item has no version or a version lower than or equal to `version`.
    ///
    /// - Returns: Whether the value was stored.
    @discardableResult
    public func set(_ value: [UInt8], forKey key: String, version: Int64) async throws(KeystoreError) -> Bool {
        var batch = KeystoreBatch()
        batch.set(value, forKey: key, version: version)
        return try await commit(batch).first ?? false
    }

    /// Removes the item stored under `key`; removing a missing item succeeds.
    public func remove(forKey key: String) async throws(KeystoreError) {
        var batch = KeystoreBatch()
        batch.remove(forKey: key)
        try await commit(batch)
    }

    /// Returns the value stored under `key`.
    ///
    /// - Throws: ``KeystoreError`` with ``KeystoreError/Code/itemNotFound`` when there is no
    ///   such item, or any error ``value(forKey:)`` throws.
    public func requireValue(forKey key: String) async throws(KeystoreError) -> [UInt8] {
        guard let value = try await value(forKey: key) else {
            throw KeystoreError(.itemNotFound, "no item under key '\(key)'")
        }
        return value
    }
}
