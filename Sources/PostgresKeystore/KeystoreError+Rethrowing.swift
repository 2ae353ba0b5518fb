import SecureStorage

extension KeystoreError {
    /// Runs SecureStorage's untyped-throwing sealing and key helpers (which only ever throw
    /// ``KeystoreError``) inside this engine's typed-throws code.
    static func rethrowing<T>(_ body: () throws -> T) throws(KeystoreError) -> T {
        do {
            return try body()
        } catch let error as KeystoreError {
            throw error
        } catch {
            throw KeystoreError(.io, "unexpected error: \(type(of: error))")
        }
    }
}
