import Dispatch

extension SQLiteKeystore {
    /// Runs `body` with the layout of `service` under `root` on a Dispatch thread, OpenSSL
    /// ready: a migration and a rotation block on SQLite's locks and fsync, which no thread of
    /// the cooperative pool may wait for.
    static func withLayoutOffThePool<T: Sendable>(
        root: String, service: String, configuration: Configuration,
        _ body: @escaping @Sendable (StoreLayout) throws(KeystoreError) -> T
    ) async throws(KeystoreError) -> T {
        try configuration.check()
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, KeystoreError>, Never>) in
            DispatchQueue.global().async {
                continuation.resume(returning: Result { () throws(KeystoreError) -> T in
                    try KeystoreError.rethrowing { try CryptoRuntime.ensureInitialised() }
                    return try body(try StoreLayout(root: root, service: service, checksWayToRoot: configuration.checksWayToRoot))
                })
            }
        }
        return try result.get()
    }
}
