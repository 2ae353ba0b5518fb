#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension KeySource {
    /// The key for `group`, or `nil` when `create` is off and the key file (or salt) does not
    /// exist yet, in which case no item of that group can exist either.
    func resolveKey(for group: AccessGroup, layout: some KeyFileLocation, create: Bool) throws -> SecretBytes? {
        switch kind {
        case .raw(let bytes):
            guard bytes.count == Sealing.keySize else {
                throw KeystoreError(.invalidKey, "a raw key must be 32 bytes")
            }
            return bytes
        case .environment(let variable):
            guard let value = getenv(variable) else {
                throw KeystoreError(.invalidKey, "environment variable \(variable) is not set")
            }
            let length = strlen(value)
            guard var decoded = Base64.decode(UnsafeBufferPointer(start: UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self), count: length)) else {
                throw KeystoreError(.invalidKey, "environment variable \(variable) is not valid base64")
            }
            guard decoded.count == Sealing.keySize else {
                CryptoRuntime.cleanse(&decoded)
                throw KeystoreError(.invalidKey, "environment variable \(variable) must hold 32 bytes in base64")
            }
            return SecretBytes(consuming: &decoded)
        case .keyFile:
            guard var bytes = try loadOrCreate(layout.keyFilePath(group), size: Sealing.keySize, group: group, layout: layout, create: create) else {
                return nil
            }
            return SecretBytes(consuming: &bytes)
        case .passphrase(let passphrase):
            guard let salt = try loadOrCreate(layout.saltPath(group), size: KeyDerivation.saltSize, group: group, layout: layout, create: create) else {
                return nil
            }
            return try KeyDerivation.scrypt(passphrase: passphrase, salt: salt)
        }
    }

    /// Reads a key or salt file after checking its permissions, or creates it from random
    /// bytes through `layout`, which makes concurrent first opens agree on one file.
    private func loadOrCreate(_ path: String, size: Int, group: AccessGroup, layout: some KeyFileLocation, create: Bool) throws -> [UInt8]? {
        let shared = group.isShared
        for _ in 0..<3 {
            if let info = try POSIX.status(path) {
                try layout.checkKeyFile(info, path: path, shared: shared)
                guard var bytes = try POSIX.readFile(path) else { continue }
                guard bytes.count == size else {
                    CryptoRuntime.cleanse(&bytes)
                    throw KeystoreError(.invalidKey, "key file has the wrong size", path: path)
                }
                return bytes
            }
            guard create else { return nil }
            var fresh = try CryptoRuntime.randomBytes(size)
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
