extension KeystoreError {
    /// Runs code written with untyped `throws` (the shared POSIX, key and sealing helpers, which
    /// only ever throw ``KeystoreError``) inside a typed-throws engine (SQLite here, and
    /// PostgresKeystore).
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
