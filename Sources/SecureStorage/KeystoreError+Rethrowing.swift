extension KeystoreError {
    /// Runs code written with untyped `throws` (the shared POSIX, key and sealing helpers, which
    /// only ever throw ``KeystoreError``) inside typed-throws code: both engines, and the
    /// sealing of items.
    package static func rethrowing<T>(_ body: () throws -> T) throws(KeystoreError) -> T {
        do {
            return try body()
        } catch let error as KeystoreError {
            throw error
        } catch {
            throw KeystoreError(.io, "unexpected error: \(type(of: error))")
        }
    }
}
