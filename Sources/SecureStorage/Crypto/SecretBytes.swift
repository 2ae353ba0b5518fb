/// Secret bytes (a key or a passphrase) kept in their own allocation and wiped on release.
///
/// Swift arrays and strings may be copied by the runtime; this buffer is never copied, so
/// wiping it on `deinit` really erases the material. Callers wipe their own temporary copies
/// with ``CryptoRuntime/cleanse(_:)-(inout [UInt8])``.
package final class SecretBytes: @unchecked Sendable {
    // Immutable after init; reads only. That is why the unchecked Sendable is sound.
    private let storage: UnsafeMutableRawBufferPointer

    /// Copies `bytes` into a fresh buffer.
    package init(copying bytes: some Collection<UInt8>) {
        storage = .allocate(byteCount: Swift.max(bytes.count, 1), alignment: 16)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        _ = storage.initializeMemory(as: UInt8.self, from: bytes)
        count = bytes.count
    }

    /// Moves `bytes` into a fresh buffer and wipes the array.
    package convenience init(consuming bytes: inout [UInt8]) {
        self.init(copying: bytes)
        CryptoRuntime.cleanse(&bytes)
    }

    package let count: Int

    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(rebasing: storage[0..<count]))
    }

    deinit {
        CryptoRuntime.cleanse(storage.baseAddress, storage.count)
        storage.deallocate()
    }
}
