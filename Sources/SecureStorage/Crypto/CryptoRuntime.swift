import CLibCrypto

/// Process-wide libcrypto state: initialised once, without OpenSSL's atexit handler (it races
/// Swift's teardown when libcurl shares the same OpenSSL), and the AES-256-GCM cipher fetched
/// once so that each seal or open skips the provider lookup.
package enum CryptoRuntime {
    private static let initialised: Bool = ib_crypto_init_no_atexit() == 1

    /// The fetched `AES-256-GCM` implementation; never freed (process lifetime).
    nonisolated(unsafe) private static let fetchedCipher: OpaquePointer? = {
        _ = initialised
        return EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)
    }()

    static func aes256GCM() throws -> OpaquePointer {
        guard let cipher = fetchedCipher else {
            throw CryptoRuntime.failure("AES-256-GCM is unavailable in libcrypto")
        }
        return cipher
    }

    package static func ensureInitialised() throws(KeystoreError) {
        guard initialised else { throw failure("libcrypto failed to initialise") }
    }

    /// A ``KeystoreError/Code/cryptoFailure`` carrying OpenSSL's first queued error, and clears
    /// the queue so it cannot leak into an unrelated later error.
    static func failure(_ reason: String) -> KeystoreError {
        let code = ERR_get_error()
        ERR_clear_error()
        return KeystoreError(.cryptoFailure, reason, openSSLError: code == 0 ? nil : UInt(code))
    }

    /// Fills `count` bytes from OpenSSL's CSPRNG.
    package static func randomBytes(_ count: Int) throws -> [UInt8] {
        try ensureInitialised()
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        guard ok == 1 else { throw failure("RAND_bytes failed") }
        return bytes
    }

    /// Overwrites memory with zeros in a way the compiler cannot elide.
    static func cleanse(_ pointer: UnsafeMutableRawPointer?, _ count: Int) {
        guard let pointer, count > 0 else { return }
        OPENSSL_cleanse(pointer, count)
    }

    /// Wipes an array's bytes in place (its storage is not reallocated).
    package static func cleanse(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { cleanse($0.baseAddress, $0.count) }
    }
}
