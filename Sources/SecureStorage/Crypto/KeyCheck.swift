/// The rule every engine uses to refuse a wrong key when it opens, before it writes.
///
/// Items sealed with one key do not open with another, so a wrong key shows as soon as an
/// item is read. But a federation replaces a saved session it cannot open (as it must for a
/// damaged one), so a process given another key (a typo in one host's environment, another
/// passphrase) would overwrite sessions with items no other process can open. So each
/// namespace keeps a known value sealed with its key, which every open must be able to open.
///
/// The first open stores it. A namespace that already holds items (written before the check
/// existed) gets it only from a key that opens one of them, so a wrong key cannot claim it
/// first; one damaged item among them does not lock out the right key.
package enum KeyCheck {
    /// The sealed value: fixed, since only whether it opens matters.
    package static let value = Array("identity-broker key check, version 1".utf8)
    /// How many existing items an unchecked namespace's key may try before it is refused.
    package static let itemsTried = 8

    /// The check sealed for `binding` under `name` (a name no item has).
    package static func seal(_ binding: ItemBinding, with secret: SecretBytes, name: String) throws(KeystoreError) -> [UInt8] {
        try binding.seal(value, with: secret, forKey: name)
    }

    /// Throws ``KeystoreError/Code/invalidKey`` unless `secret` opens the stored check.
    package static func verify(
        _ stored: [UInt8], binding: ItemBinding, with secret: SecretBytes, name: String, namespace: String
    ) throws(KeystoreError) {
        try verify(stored, binding: binding, keys: KeyRing(sealing: secret), name: name, namespace: namespace)
    }

    /// Throws ``KeystoreError/Code/invalidKey`` unless the sealing key of `keys` opens the
    /// stored check: a process seals with that key, so it must be the namespace's. When one
    /// of the opening keys opens it instead, the message says that the namespace has not
    /// been rotated to the sealing key yet.
    package static func verify(
        _ stored: [UInt8], binding: ItemBinding, keys: KeyRing, name: String, namespace: String
    ) throws(KeystoreError) {
        switch opener(of: stored, binding: binding, keys: keys, name: name) {
        case .sealing:
            return
        case .opening:
            throw KeystoreError(
                .invalidKey,
                "the key check of \(namespace) opens with one of the keys that only open, not with the sealing key: "
                    + "the namespace is still sealed with that key; \(KeystoreError.notRotatedYetReason) (rekey), "
                    + "or seal with the old key and open with the new one until then")
        case nil:
            throw KeystoreError(
                .invalidKey,
                "the key does not open the key check of \(namespace): \(KeystoreError.wrongKeyReason) are sealed with")
        }
    }

    /// Which key of `keys` opens the stored check, or `nil` when none does.
    package static func opener(of stored: [UInt8], binding: ItemBinding, keys: KeyRing, name: String) -> KeyRing.Opener? {
        guard let (opened, opener) = try? keys.open(stored, binding: binding, forKey: name), opened == value else { return nil }
        return opener
    }

    /// Throws ``KeystoreError/Code/invalidKey`` when there are `items` (up to ``itemsTried``)
    /// and `opens` is false for every one.
    package static func requireOneOpens<Item>(
        _ items: [Item], namespace: String, opens: (Item) -> Bool
    ) throws(KeystoreError) {
        guard !items.isEmpty, !items.contains(where: opens) else { return }
        throw KeystoreError(
            .invalidKey,
            "the key opens none of the first \(items.count) items of \(namespace): \(KeystoreError.wrongKeyReason) were sealed with")
    }

    /// How errors name a namespace.
    package static func describe(service: String, group: AccessGroup) -> String {
        "service '\(service)' " + (group.name.map { "in access group '\($0)'" } ?? "with no access group")
    }
}
