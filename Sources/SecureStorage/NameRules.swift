/// What every engine asks of the names it is given: an item key, a service name, an access
/// group name. One rule, so code written against ``InMemoryKeystore`` meets the same refusals
/// on ``SQLiteKeystore`` and `PostgresKeystore`.
package enum NameRules {
    /// Non-empty and at most `limit` bytes of UTF-8, else ``KeystoreError/Code/invalidName``
    /// naming `what` (never the name: a key may be a user's e-mail address).
    package static func validate(name: String, what: String, limit: Int) throws(KeystoreError) {
        let count = name.utf8.count
        guard count > 0 else { throw KeystoreError(.invalidName, "the \(what) is empty") }
        guard count <= limit else { throw KeystoreError(.invalidName, "the \(what) is longer than \(limit) bytes") }
    }

    /// A service name: non-empty, at most ``AccessGroup/maximumNameBytes`` bytes.
    package static func validate(service: String) throws(KeystoreError) {
        try validate(name: service, what: "service name", limit: AccessGroup.maximumNameBytes)
    }

    /// An access group's name, when it has one: non-empty, at most
    /// ``AccessGroup/maximumNameBytes`` bytes.
    package static func validate(group: AccessGroup) throws(KeystoreError) {
        guard let name = group.name else { return }
        try validate(name: name, what: "access group name", limit: AccessGroup.maximumNameBytes)
    }

    /// An item key: non-empty, at most ``ItemKey/maximumBytes`` bytes, without a NUL
    /// character (PostgreSQL's text cannot hold one, so no engine takes one).
    package static func validate(key: String) throws(KeystoreError) {
        try validate(name: key, what: "item key", limit: ItemKey.maximumBytes)
        guard !key.utf8.contains(0) else { throw KeystoreError(.invalidName, "the item key contains a NUL character") }
    }
}
