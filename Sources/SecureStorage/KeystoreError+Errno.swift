#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension KeystoreError {
    static func describe(errno code: Int32) -> String {
        guard let message = strerror(code) else { return "unknown error" }
        return String(cString: message)
    }

    /// An ``Code/io`` error for the current `errno`.
    static func io(_ operation: String, path: String, errno code: Int32? = nil) -> KeystoreError {
        KeystoreError(.io, "\(operation) failed", path: path, errno: code ?? currentErrno())
    }
}

/// The calling thread's `errno` (a free function, since ``KeystoreError/errno`` shadows it).
private func currentErrno() -> Int32 { errno }
