import CLibCrypto

/// AES-256-GCM sealing of keystore items through OpenSSL EVP.
///
/// A sealed item is `version (1 byte) ‖ nonce (12 bytes) ‖ ciphertext ‖ tag (16 bytes)`. The
/// version byte is also the first byte of the associated data, so it cannot be altered.
package enum Sealing {
    package static let formatVersion: UInt8 = 1
    package static let keySize = 32
    static let nonceSize = 12
    static let tagSize = 16
    static let overhead = 1 + nonceSize + tagSize
    /// The most bytes a sealed item may hold, in every engine: sessions take ~1.3 KB. Whoever
    /// can write a store's rows (another member of a shared group, another database role)
    /// must not make a reader allocate without limit, nor a caller seal what no engine keeps.
    package static let maximumSealedBytes = 1 << 20

    /// Throws ``KeystoreError/Code/valueTooLarge`` when a value of `count` bytes, sealed,
    /// would exceed ``maximumSealedBytes``: every engine's limit, ``InMemoryKeystore``'s too,
    /// though it seals nothing.
    package static func requireSealable(count: Int) throws(KeystoreError) {
        guard count <= maximumSealedBytes - overhead else {
            throw KeystoreError(.valueTooLarge, "the sealed value would be larger than the keystore's limit of \(maximumSealedBytes) bytes")
        }
    }

    /// Seals `plaintext` under `key` with a fresh random nonce.
    ///
    /// - Throws: ``KeystoreError/Code/valueTooLarge`` when the sealed item would exceed
    ///   ``maximumSealedBytes``.
    package static func seal(_ plaintext: [UInt8], key: SecretBytes, associatedData: [UInt8]) throws -> [UInt8] {
        try requireSealable(count: plaintext.count)
        let nonce = try CryptoRuntime.randomBytes(nonceSize)
        var aad = [formatVersion]
        aad += associatedData
        let (ciphertext, tag) = try key.withUnsafeBytes { keyBytes in
            try encrypt(key: keyBytes, nonce: nonce, associatedData: aad, plaintext: plaintext)
        }
        var sealed = [UInt8]()
        sealed.reserveCapacity(overhead + ciphertext.count)
        sealed.append(formatVersion)
        sealed += nonce
        sealed += ciphertext
        sealed += tag
        return sealed
    }

    /// Opens a sealed item, or throws ``KeystoreError/Code/authenticationFailed`` when the tag
    /// does not verify (tampering, another name or group, another key) and
    /// ``KeystoreError/Code/corruptFormat`` for an item too short to be sealed or larger than
    /// ``maximumSealedBytes``. An unknown format version also gives
    /// ``KeystoreError/Code/authenticationFailed``.
    package static func open(_ sealed: [UInt8], key: SecretBytes, associatedData: [UInt8]) throws -> [UInt8] {
        guard sealed.count >= overhead else {
            throw KeystoreError(.corruptFormat, "sealed item is too short (\(sealed.count) bytes)")
        }
        guard sealed.count <= maximumSealedBytes else {
            throw KeystoreError(.corruptFormat, "sealed item is larger than the keystore's limit of \(maximumSealedBytes) bytes")
        }
        // The version byte is authenticated too: an unknown one is indistinguishable from
        // tampering, and is reported the same way.
        guard sealed[0] == formatVersion else {
            throw KeystoreError(.authenticationFailed, "item failed authentication (unsupported format version or tampered)")
        }
        var aad = [formatVersion]
        aad += associatedData
        let nonce = Array(sealed[1..<(1 + nonceSize)])
        let ciphertext = Array(sealed[(1 + nonceSize)..<(sealed.count - tagSize)])
        let tag = Array(sealed[(sealed.count - tagSize)...])
        return try key.withUnsafeBytes { keyBytes in
            try decrypt(key: keyBytes, nonce: nonce, associatedData: aad, ciphertext: ciphertext, tag: tag)
        }
    }

    // MARK: Raw AES-256-GCM (checked against published test vectors)

    /// AES-256-GCM encryption with a 96-bit nonce and a 128-bit tag.
    static func encrypt(
        key: UnsafeRawBufferPointer,
        nonce: [UInt8],
        associatedData: [UInt8],
        plaintext: [UInt8]
    ) throws -> (ciphertext: [UInt8], tag: [UInt8]) {
        guard key.count == keySize, nonce.count == nonceSize else {
            throw KeystoreError(.invalidKey, "AES-256-GCM needs a 32-byte key and a 12-byte nonce")
        }
        let cipher = try CryptoRuntime.aes256GCM()
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoRuntime.failure("EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(context) }

        guard EVP_EncryptInit_ex(context, cipher, nil, nil, nil) == 1,
              ib_crypto_gcm_set_ivlen(context, Int32(nonceSize)) == 1,
              EVP_EncryptInit_ex(context, nil, nil, key.bindMemory(to: UInt8.self).baseAddress, nonce) == 1
        else { throw CryptoRuntime.failure("AES-256-GCM initialisation failed") }

        var length: Int32 = 0
        if !associatedData.isEmpty {
            guard EVP_EncryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1 else {
                throw CryptoRuntime.failure("AES-256-GCM associated data failed")
            }
        }
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + 16)
        var written = 0
        if !plaintext.isEmpty {
            let ok = ciphertext.withUnsafeMutableBufferPointer {
                EVP_EncryptUpdate(context, $0.baseAddress, &length, plaintext, Int32(plaintext.count))
            }
            guard ok == 1 else { throw CryptoRuntime.failure("AES-256-GCM encryption failed") }
            written = Int(length)
        }
        let finalOK = ciphertext.withUnsafeMutableBufferPointer {
            EVP_EncryptFinal_ex(context, $0.baseAddress! + written, &length)
        }
        guard finalOK == 1 else { throw CryptoRuntime.failure("AES-256-GCM finalisation failed") }
        written += Int(length)
        ciphertext.removeSubrange(written...)

        var tag = [UInt8](repeating: 0, count: tagSize)
        let tagOK = tag.withUnsafeMutableBytes { ib_crypto_gcm_get_tag(context, Int32(tagSize), $0.baseAddress) }
        guard tagOK == 1 else { throw CryptoRuntime.failure("AES-256-GCM tag failed") }
        return (ciphertext, tag)
    }

    /// AES-256-GCM decryption; throws ``KeystoreError/Code/authenticationFailed`` when the tag
    /// does not verify. No plaintext is returned (or left in memory) on failure.
    static func decrypt(
        key: UnsafeRawBufferPointer,
        nonce: [UInt8],
        associatedData: [UInt8],
        ciphertext: [UInt8],
        tag: [UInt8]
    ) throws -> [UInt8] {
        guard key.count == keySize, nonce.count == nonceSize, tag.count == tagSize else {
            throw KeystoreError(.invalidKey, "AES-256-GCM needs a 32-byte key, a 12-byte nonce and a 16-byte tag")
        }
        let cipher = try CryptoRuntime.aes256GCM()
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoRuntime.failure("EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(context) }

        guard EVP_DecryptInit_ex(context, cipher, nil, nil, nil) == 1,
              ib_crypto_gcm_set_ivlen(context, Int32(nonceSize)) == 1,
              EVP_DecryptInit_ex(context, nil, nil, key.bindMemory(to: UInt8.self).baseAddress, nonce) == 1
        else { throw CryptoRuntime.failure("AES-256-GCM initialisation failed") }

        var length: Int32 = 0
        if !associatedData.isEmpty {
            guard EVP_DecryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1 else {
                throw CryptoRuntime.failure("AES-256-GCM associated data failed")
            }
        }
        var plaintext = [UInt8](repeating: 0, count: ciphertext.count + 16)
        var written = 0
        if !ciphertext.isEmpty {
            let ok = plaintext.withUnsafeMutableBufferPointer {
                EVP_DecryptUpdate(context, $0.baseAddress, &length, ciphertext, Int32(ciphertext.count))
            }
            guard ok == 1 else {
                CryptoRuntime.cleanse(&plaintext)
                throw CryptoRuntime.failure("AES-256-GCM decryption failed")
            }
            written = Int(length)
        }
        var expectedTag = tag
        let tagOK = expectedTag.withUnsafeMutableBytes {
            ib_crypto_gcm_set_tag(context, Int32(tagSize), $0.baseAddress)
        }
        guard tagOK == 1 else {
            // What was decrypted so far is not authenticated: nothing of it may stay behind.
            CryptoRuntime.cleanse(&plaintext)
            throw CryptoRuntime.failure("AES-256-GCM tag failed")
        }
        let finalOK = plaintext.withUnsafeMutableBufferPointer {
            EVP_DecryptFinal_ex(context, $0.baseAddress! + written, &length)
        }
        guard finalOK == 1 else {
            CryptoRuntime.cleanse(&plaintext)
            ERR_clear_error()
            throw KeystoreError(.authenticationFailed, "item failed authentication (tampered, moved, or wrong key)")
        }
        written += Int(length)
        plaintext.removeSubrange(written...)
        return plaintext
    }
}
