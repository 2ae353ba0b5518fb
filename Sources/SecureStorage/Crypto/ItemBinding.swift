/// The associated data that binds a sealed item to its service, access group and key, so a
/// ciphertext moved to another name fails to open. Every backend uses it, so an item sealed
/// by one opens in another only under the same name.
package struct ItemBinding: Sendable {
    private let prefix: [UInt8]

    package init(service: String, group: AccessGroup) {
        var prefix = Array("IdentityBroker.SecureStorage\0".utf8)
        Self.appendField(Array(service.utf8), to: &prefix)
        if let name = group.name {
            prefix.append(1)
            Self.appendField(Array(name.utf8), to: &prefix)
        } else {
            prefix.append(0)
        }
        self.prefix = prefix
    }

    private static func appendField(_ field: [UInt8], to bytes: inout [UInt8]) {
        let count = UInt32(field.count)
        bytes += [UInt8(count >> 24), UInt8(count >> 16 & 0xFF), UInt8(count >> 8 & 0xFF), UInt8(count & 0xFF)]
        bytes += field
    }

    /// `"IdentityBroker.SecureStorage\0" ‖ len ‖ service ‖ kind ‖ [len ‖ group] ‖ len ‖ key`
    /// (lengths are 32-bit big-endian; kind is 0 for no group, 1 for a named group).
    package func associatedData(forKey key: String) -> [UInt8] {
        var data = prefix
        Self.appendField(Array(key.utf8), to: &data)
        return data
    }

    /// Seals `value` for `key` with the namespace's `secret`, as every engine stores it.
    package func seal(_ value: [UInt8], with secret: SecretBytes, forKey key: String) throws(KeystoreError) -> [UInt8] {
        try KeystoreError.rethrowing { try Sealing.seal(value, key: secret, associatedData: associatedData(forKey: key)) }
    }

    /// Opens one stored row; a failure names the key (and `path`, where the engine has one) and
    /// concerns that item alone.
    package func open(_ sealed: [UInt8], with secret: SecretBytes, forKey key: String, path: String? = nil) throws(KeystoreError) -> [UInt8] {
        do {
            return try Sealing.open(sealed, key: secret, associatedData: associatedData(forKey: key))
        } catch let error as KeystoreError {
            throw KeystoreError(error.code, "item '\(key)': \(error.reason)", path: path, errno: error.errno, openSSLError: error.openSSLError)
        } catch {
            throw KeystoreError(.cryptoFailure, "item '\(key)' could not be opened", path: path)
        }
    }
}
