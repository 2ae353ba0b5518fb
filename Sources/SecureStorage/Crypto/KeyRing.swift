import CLibCrypto

/// A namespace's keys: the one that seals (and opens), and those that only open, from
/// ``KeySource/alsoOpening(_:)``.
///
/// An item is opened with the sealing key first; the others are tried only when that fails
/// authentication, so a namespace whose items are all sealed with its sealing key pays
/// nothing for them.
package struct KeyRing: Sendable {
    /// The key new items and the key check are sealed with.
    package let sealing: SecretBytes
    /// The keys that only open, in the order they are tried; none equals ``sealing``.
    package let opening: [SecretBytes]

    /// A ring of `sealing` and `opening`, without any opening key equal to `sealing` or to an
    /// earlier one (the same key named twice, as a key file that is both the sealing and an
    /// opening source, is tried once).
    package init(sealing: SecretBytes, opening: [SecretBytes] = []) {
        self.sealing = sealing
        var distinct: [SecretBytes] = []
        for key in opening where !Self.equal(key, sealing) && !distinct.contains(where: { Self.equal($0, key) }) {
            distinct.append(key)
        }
        self.opening = distinct
    }

    /// Which key of a ring opened an item.
    package enum Opener: Sendable, Equatable {
        /// The sealing key: the item needs nothing.
        case sealing
        /// An opening key: a rotation re-seals the item with the sealing key.
        case opening
    }

    /// Opens `sealed` with the first key that authenticates it; when none does, the sealing
    /// key's error, which says why (a wrong key and tampering look the same).
    package func open(_ sealed: [UInt8], binding: ItemBinding, forKey key: String, path: String? = nil) throws(KeystoreError) -> (value: [UInt8], opener: Opener) {
        do {
            return (try binding.open(sealed, with: sealing, forKey: key, path: path), .sealing)
        } catch where error.code == .authenticationFailed && !opening.isEmpty {
            for other in opening {
                if let value = try? binding.open(sealed, with: other, forKey: key, path: path) { return (value, .opening) }
            }
            throw error
        }
    }

    /// Whether one of the keys opens `sealed`; what it holds is wiped at once (the key
    /// checks only ask whether a key opens an item).
    package func opens(_ sealed: [UInt8], binding: ItemBinding, forKey key: String) -> Bool {
        guard var opened = try? open(sealed, binding: binding, forKey: key) else { return false }
        CryptoRuntime.cleanse(&opened.value)
        return true
    }

    /// Compared in constant time, as key material is.
    private static func equal(_ a: SecretBytes, _ b: SecretBytes) -> Bool {
        a.count == b.count && a.withUnsafeBytes { a in b.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) == 0 } }
    }
}
