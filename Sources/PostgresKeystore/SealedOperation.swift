/// A batch operation after sealing: only ciphertext goes into a transaction.
enum SealedOperation: Sendable {
    case set(key: String, sealed: [UInt8], version: Int64?)
    case remove(key: String)
}
