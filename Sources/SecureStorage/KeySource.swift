/// Where a keystore's 256-bit AES key comes from.
///
/// - ``keyFile``: with `SQLiteKeystore`, a random key per access group, kept in a file in the
///   keystore root and created atomically on first use (0600, or 0640 for a shared group;
///   never over items sealed with another key, which make opening fail with
///   ``KeystoreError/Code/invalidKey``);
///   opening fails with ``KeystoreError/Code/insecurePermissions`` when the file is looser
///   than that. With `PostgresKeystore`, the one existing file its configuration's
///   `keyFilePath` names, the same on every instance and for every group, never created.
/// - ``keyFile(at:)``: the key in a file you name, read at once.
/// - ``environment(variable:)``: a 32-byte key in canonical base64 from an environment variable
///   (`IDENTITY_BROKER_KEY` by default), the same for every access group.
/// - ``passphrase(_:)``: a key derived with scrypt from a passphrase and a random salt stored,
///   with the scrypt parameters, per access group next to where its key file would be.
/// - ``raw(_:)``: 32 bytes given directly, for tests and for callers with their own key
///   management.
///
/// A key source seals with one key and may open with others too (``alsoOpening(_:)``): that is
/// how a namespace's key is rotated without losing an item (<doc:RotatingKeys>).
///
/// Secret material given to a key source is copied into memory that is wiped when the last
/// copy of the key source is released; a key source's description never shows it.
public struct KeySource: Sendable, CustomStringConvertible, CustomReflectable {
    package enum Kind: Sendable {
        case keyFile
        case environment(String)
        case passphrase(SecretBytes)
        case raw(SecretBytes)
    }

    /// Where the key that seals (and opens) comes from.
    package let kind: Kind
    /// Where the keys that only open come from, in the order they are tried.
    package private(set) var alsoOpeningKinds: [Kind] = []

    private init(_ kind: Kind) { self.kind = kind }

    /// This source, with the keys of `others` opening items too; new items, and the
    /// namespace's key check, are still sealed with this source's key only.
    ///
    /// Use it to rotate a namespace's key (<doc:RotatingKeys>): before the rotation, every
    /// process seals with the old key and also opens with the new one; the rotation
    /// (`SQLiteKeystore.rekey`, `PostgresKeystore.rekey`) re-seals every item with the new
    /// key; after it, processes seal with the new key and also open with the old one, until
    /// a last rotation has re-sealed what they wrote meanwhile.
    ///
    /// An item is opened with this source's key first and the others only when it fails
    /// authentication, so items sealed with the sealing key cost nothing more. A key file
    /// or passphrase salt that does not exist (yet) gives no key to open with, rather than
    /// an error; every other failure to resolve one of the keys fails the open, as the
    /// sealing key's would. `others`' own ``alsoOpening(_:)`` keys are kept too.
    public func alsoOpening(_ others: KeySource...) -> KeySource {
        var source = self
        for other in others {
            source.alsoOpeningKinds.append(other.kind)
            source.alsoOpeningKinds += other.alsoOpeningKinds
        }
        return source
    }

    /// The default environment variable holding a base64 key: `IDENTITY_BROKER_KEY`.
    public static let defaultEnvironmentVariable = "IDENTITY_BROKER_KEY"

    /// A key file: with `SQLiteKeystore`, one per access group in the keystore root, created
    /// on first use; with `PostgresKeystore`, the existing file its configuration's
    /// `keyFilePath` names.
    public static let keyFile = KeySource(.keyFile)

    /// A 32-byte key in canonical standard base64 read from the environment variable
    /// `variable` when a keystore opens.
    ///
    /// The value must be exactly 44 characters of the standard alphabet (`A–Z a–z 0–9 + /`)
    /// ending in one `=`, with the unused low bits of the last symbol zero, as
    /// `openssl rand -base64 32` prints it; spaces, tabs and newlines around it are ignored.
    /// Anything else (a missing variable, spaces inside, extra padding, the URL alphabet,
    /// another length) gives ``KeystoreError/Code/invalidKey``, whose message never contains
    /// the value.
    public static func environment(variable: String = defaultEnvironmentVariable) -> KeySource {
        KeySource(.environment(variable))
    }

    /// A key derived from `passphrase` with scrypt and a random 16-byte salt stored per access
    /// group.
    ///
    /// A new salt file records the scrypt parameters with the salt: N = 2^17, r = 8, p = 1
    /// (128 MiB of memory and a few hundred milliseconds per open), so later releases can raise
    /// them without making existing items unreadable. A salt file written before the parameters
    /// were stored (16 bytes, no header) keeps being read with N = 2^15, r = 8, p = 1, the cost
    /// its items were sealed under. A truncated salt file, one of an unknown version, or one
    /// asking for parameters below N = 2^17 or above 1 GiB of memory gives
    /// ``KeystoreError/Code/corruptFormat``; an empty passphrase gives
    /// ``KeystoreError/Code/invalidKey`` where no salt exists yet (one an earlier release
    /// stored is still used, so such a store can be read and migrated to another key).
    public static func passphrase(_ passphrase: String) -> KeySource {
        KeySource(.passphrase(SecretBytes(copying: passphrase.utf8)))
    }

    /// A 32-byte key given directly. Any other length gives ``KeystoreError/Code/invalidKey``
    /// when a keystore opens.
    public static func raw(_ key: [UInt8]) -> KeySource {
        KeySource(.raw(SecretBytes(copying: key)))
    }

    /// The keys that only open, each in turn as if it sealed, with the others opening: what a
    /// rotation proves its authority with before it makes the sealing key (a new key file, a
    /// salt), taking the first whose key exists.
    package var openingOnly: [KeySource] {
        alsoOpeningKinds.indices.map { index in
            var source = KeySource(alsoOpeningKinds[index])
            source.alsoOpeningKinds = Array(alsoOpeningKinds[..<index] + alsoOpeningKinds[(index + 1)...])
            return source
        }
    }

    /// The 32-byte key in the file at `path`, read now: a key given by a path rather than
    /// kept by the keystore, such as a key file moved aside to be rotated
    /// (`.keyFile.alsoOpening(try .keyFile(at: moved))`, <doc:RotatingKeys>).
    ///
    /// The file must be a regular file (not a link) of exactly 32 bytes, owned by this user
    /// or root, neither group- nor world-writable nor world-readable. Its key is copied into
    /// memory that is wiped when the last copy of the key source is released; the source
    /// describes itself as `raw`.
    ///
    /// - Throws: ``KeystoreError/Code/invalidKey`` when the file does not exist or has
    ///   another size; ``KeystoreError/Code/insecurePermissions`` when it is not a regular
    ///   file (a FIFO, a device, a directory) or its owner or mode is looser than that;
    ///   ``KeystoreError/Code/io`` when it is a symbolic link (`ELOOP`: it is never followed)
    ///   or cannot be read.
    public static func keyFile(at path: String) throws(KeystoreError) -> KeySource {
        KeySource(.raw(try readKeyFile(at: path)))
    }

    /// The kind of source, without any secret: `keyFile`, `environment(NAME)`, `passphrase`
    /// or `raw`, followed by ` also opening [...]` with the kinds of the keys that only open.
    public var description: String {
        let sealing = Self.describe(kind)
        guard !alsoOpeningKinds.isEmpty else { return sealing }
        return sealing + " also opening [" + alsoOpeningKinds.map(Self.describe).joined(separator: ", ") + "]"
    }

    private static func describe(_ kind: Kind) -> String {
        switch kind {
        case .keyFile: "keyFile"
        case .environment(let variable): "environment(\(variable))"
        case .passphrase: "passphrase"
        case .raw: "raw"
        }
    }

    /// The description alone: `dump` and `Mirror` would otherwise walk into the secret's
    /// buffer (its length, its address).
    public var customMirror: Mirror {
        Mirror(self, children: ["kind": description], displayStyle: .struct)
    }
}
