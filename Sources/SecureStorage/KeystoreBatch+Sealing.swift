/// A batch operation after sealing, as an engine applies it: only ciphertext crosses into
/// the engine's writer (a queue, a database connection).
package enum SealedOperation: Sendable {
    case set(key: String, sealed: [UInt8], version: Int64?)
    case remove(key: String)
}

extension KeystoreBatch {
    /// Every operation, its key checked by `validate` and its value sealed by `seal`, in
    /// order; the first failure throws and nothing is returned (so nothing is applied).
    /// One place for what every engine does before it writes.
    package func sealed(
        validate: (String) throws(KeystoreError) -> Void,
        seal: ([UInt8], String) throws(KeystoreError) -> [UInt8]
    ) throws(KeystoreError) -> [SealedOperation] {
        var sealed: [SealedOperation] = []
        sealed.reserveCapacity(operations.count)
        for operation in operations {
            try validate(operation.key)
            switch operation {
            case .set(let key, let value, let version):
                sealed.append(.set(key: key, sealed: try seal(value, key), version: version))
            case .remove(let key):
                sealed.append(.remove(key: key))
            }
        }
        return sealed
    }
}
