#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A namespace's keys, and whether only a namespace that already holds items may use them.
struct ResolvedKey {
    var key: SecretBytes
    /// The keys of ``KeySource/alsoOpening(_:)`` that exist.
    var opening: [SecretBytes] = []
    /// The salt file the key was derived from when it has no header (the 16 bare bytes of
    /// releases before the header, read with the legacy, cheaper scrypt cost) and lies in a
    /// shared group's directory, which every member can write: planted before the group's
    /// first use, it would pick the salt and the cost of everything sealed there afterwards.
    /// Such a key is only taken where something already sealed under it opens: the
    /// namespace's items or key check, or another service's key check in the group.
    var headerlessSharedSalt: String?
}

extension KeySource {
    /// The keys for `group`, or `nil` when `create` is off and the key file (or salt) does not
    /// exist yet, in which case no item of that group can exist either. Keys that only open
    /// are never created: one whose file or salt does not exist is left out.
    func resolveKey(for group: AccessGroup, layout: some KeyFileLocation, create: Bool) throws -> ResolvedKey? {
        guard var resolved = try Self.resolve(kind, for: group, layout: layout, create: create) else { return nil }
        for other in alsoOpeningKinds {
            if let key = try Self.resolve(other, for: group, layout: layout, create: false)?.key { resolved.opening.append(key) }
        }
        return resolved
    }

    private static func resolve(_ kind: Kind, for group: AccessGroup, layout: some KeyFileLocation, create: Bool) throws -> ResolvedKey? {
        switch kind {
        case .raw(let bytes):
            guard bytes.count == Sealing.keySize else {
                throw KeystoreError(.invalidKey, "a raw key must be 32 bytes")
            }
            return ResolvedKey(key: bytes)
        case .environment(let variable):
            return ResolvedKey(key: try environmentKey(variable: variable))
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
    private static func loadOrCreate(
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

    /// Reads an existing 32-byte key file named by a path (`PostgresKeystore`'s key file, the
    /// CLI's other key file) that is a regular file (not a link), owned by this user or root,
    /// neither group- or world-writable nor world-readable.
    package static func readKeyFile(at path: String) throws(KeystoreError) -> SecretBytes {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT {
                throw KeystoreError(.invalidKey, "the key file does not exist; create it once (32 random bytes, for example `openssl rand 32`) and give every instance the same file", path: path, errno: code)
            }
            throw KeystoreError(.io, "opening the key file failed", path: path, errno: code)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw KeystoreError(.io, "fstat failed", path: path, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw KeystoreError(.insecurePermissions, "the key file is not a regular file", path: path, mode: UInt32(info.st_mode))
        }
        guard info.st_mode & 0o022 == 0, info.st_mode & 0o004 == 0 else {
            throw KeystoreError(.insecurePermissions, "the key file is group- or world-writable or world-readable", path: path, mode: UInt32(info.st_mode))
        }
        guard info.st_uid == geteuid() || info.st_uid == 0 else {
            throw KeystoreError(.insecurePermissions, "the key file belongs to another user", path: path, mode: UInt32(info.st_mode))
        }
        guard info.st_size == off_t(Sealing.keySize) else {
            throw KeystoreError(.invalidKey, "the key file must hold exactly 32 bytes", path: path)
        }
        var bytes = [UInt8](repeating: 0, count: Sealing.keySize)
        let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count == Sealing.keySize else {
            CryptoRuntime.cleanse(&bytes)
            throw KeystoreError(.io, "reading the key file failed", path: path, errno: count < 0 ? errno : EIO)
        }
        return SecretBytes(consuming: &bytes)
    }
}
