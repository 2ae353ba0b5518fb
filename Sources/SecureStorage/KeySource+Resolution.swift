#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A namespace's key, and whether only a namespace that already holds items may use it.
struct ResolvedKey {
    var key: SecretBytes
    /// The salt file the key was derived from when it has no header (the 16 bare bytes of
    /// releases before the header, read with the legacy, cheaper scrypt cost) and lies in a
    /// shared group's directory, which every member can write: planted before the group's
    /// first use, it would pick the salt and the cost of everything sealed there afterwards.
    /// Such a key is only taken where something already sealed under it opens: the
    /// namespace's items or key check, or another service's key check in the group.
    var headerlessSharedSalt: String?
}

extension KeySource {
    /// The key for `group`, or `nil` when `create` is off and the key file (or salt) does not
    /// exist yet, in which case no item of that group can exist either.
    func resolveKey(for group: AccessGroup, layout: some KeyFileLocation, create: Bool) throws -> ResolvedKey? {
        switch kind {
        case .raw(let bytes):
            guard bytes.count == Sealing.keySize else {
                throw KeystoreError(.invalidKey, "a raw key must be 32 bytes")
            }
            return ResolvedKey(key: bytes)
        case .environment(let variable):
            return ResolvedKey(key: try Self.environmentKey(variable: variable))
        case .keyFile:
            let path = layout.keyFilePath(group)
            let fresh = { try CryptoRuntime.randomBytes(Sealing.keySize) }
            guard var bytes = try loadOrCreate(path, group: group, layout: layout, create: create, fresh: fresh) else {
                return nil
            }
            guard bytes.count == Sealing.keySize else {
                CryptoRuntime.cleanse(&bytes)
                throw KeystoreError(.invalidKey, "key file has the wrong size", path: path)
            }
            return ResolvedKey(key: SecretBytes(consuming: &bytes))
        case .passphrase(let passphrase):
            // New salt files record the current scrypt parameters; a legacy 16-byte salt file
            // keeps the parameters its items were sealed under.
            let path = layout.saltPath(group)
            var creatingSalt = false
            if create { creatingSalt = try POSIX.status(path) == nil }
            try KeyDerivation.requireUsable(passphrase, creatingSalt: creatingSalt)
            let fresh = { KeyDerivation.SaltFile.encode(salt: try CryptoRuntime.randomBytes(KeyDerivation.saltSize)) }
            guard let bytes = try loadOrCreate(path, group: group, layout: layout, create: create, fresh: fresh) else {
                return nil
            }
            let stored = try KeyDerivation.SaltFile.decode(bytes, path: path)
            let key = try KeyDerivation.scrypt(passphrase: passphrase, salt: stored.salt, parameters: stored.parameters)
            let headerless = bytes.count == KeyDerivation.saltSize && group.isShared
            return ResolvedKey(key: key, headerlessSharedSalt: headerless ? path : nil)
        }
    }

    /// The 32-byte key held, in canonical standard base64, by the environment variable
    /// `variable`; every backend reads ``environment(variable:)`` keys this way.
    ///
    /// - Throws: ``KeystoreError/Code/invalidKey`` when the variable is missing or not
    ///   canonical base64 of 32 bytes; the message never contains the value.
    package static func environmentKey(variable: String) throws(KeystoreError) -> SecretBytes {
        guard let value = getenv(variable) else {
            throw KeystoreError(.invalidKey, "environment variable \(variable) is not set")
        }
        let length = strlen(value)
        let text = UnsafeBufferPointer(start: UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self), count: length)
        // Canonical standard base64 only (44 characters ending in one `=`), so one key has
        // one spelling; never echo the value.
        guard var decoded = Base64.decodeCanonical(text) else {
            throw KeystoreError(.invalidKey, "environment variable \(variable) is not canonical base64: it must hold 32 bytes as 44 characters of standard base64 ending in one '='")
        }
        guard decoded.count == Sealing.keySize else {
            CryptoRuntime.cleanse(&decoded)
            throw KeystoreError(.invalidKey, "environment variable \(variable) must hold 32 bytes in base64 (44 characters ending in one '=')")
        }
        return SecretBytes(consuming: &decoded)
    }

    /// Reads a key or salt file after checking its permissions, or creates it with the bytes
    /// `fresh` makes, through `layout`, which makes concurrent first opens agree on one file.
    private func loadOrCreate(
        _ path: String, group: AccessGroup, layout: some KeyFileLocation, create: Bool, fresh makeFresh: () throws -> [UInt8]
    ) throws -> [UInt8]? {
        let shared = group.isShared
        for _ in 0..<3 {
            if let info = try POSIX.status(path) {
                try layout.checkKeyFile(info, path: path, shared: shared)
                // Checked again as opened: in a shared group's directory another member may
                // replace the file between the two.
                guard let bytes = try POSIX.readFile(path, checking: { try layout.checkKeyFile($0, path: path, shared: shared) }) else {
                    continue
                }
                return bytes
            }
            guard create else { return nil }
            var fresh = try makeFresh()
            let created: Bool
            do {
                created = try layout.createKeyFile(fresh, at: path, group: group)
            } catch {
                CryptoRuntime.cleanse(&fresh)
                throw error
            }
            if created { return fresh }
            CryptoRuntime.cleanse(&fresh)
            // Another opener created it first: read theirs.
        }
        throw KeystoreError(.io, "key file keeps disappearing", path: path, errno: ENOENT)
    }
}
