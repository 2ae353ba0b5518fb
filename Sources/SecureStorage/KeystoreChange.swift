/// One element of a ``Keystore/changes()`` feed.
public enum KeystoreChange: Sendable, Hashable {
    /// The item under this key was set or removed.
    case item(String)
    /// The feed lost track of individual keys (its log was trimmed past this subscriber, the
    /// subscriber's buffer overflowed, or the store was reopened): reload everything you hold.
    case all
}
