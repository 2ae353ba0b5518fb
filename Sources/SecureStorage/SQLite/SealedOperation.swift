/// A batch operation after sealing, as the writer applies it: only ciphertext crosses into
/// the writer's queue.
enum SealedOperation: Sendable {
    case set(key: String, sealed: [UInt8], version: Int64?)
    case remove(key: String)
}
