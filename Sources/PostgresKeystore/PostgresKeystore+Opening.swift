package import Logging
import PostgresNIO
package import SecureStorage

extension PostgresKeystore {
    /// What opening a namespace found: its sealing key and settings, and the commit call.
    struct OpenedNamespace: Sendable {
        let namespace: PostgresNamespace
        let commitCall: String
        /// The schema (quoted) the open found the tables in and checked: the pool's
        /// connections' only `search_path`.
        let schema: String
    }

    /// What every opening does before it connects: the names checked, OpenSSL ready, and the
    /// warning of a connection TLS does not protect; returns the logger to use (one that
    /// drops everything when `logger` is `nil`).
    static func prepareOpening(
        service: String, group: AccessGroup, configuration: Configuration, logger: Logger?
    ) throws(KeystoreError) -> Logger {
        try configuration.check()
        try PostgresNamespace.validate(service: service, group: group)
        try CryptoRuntime.ensureInitialised()
        let quiet = logger ?? Logger(label: "IdentityBroker.PostgresKeystore", factory: { _ in SwiftLogNoOpLogHandler() })
        if let warning = configuration.unprotectedTransportWarning {
            quiet.warning("\(warning)", metadata: ["broker.endpoint": "\(configuration.endpoint)"])
        }
        return quiet
    }

    /// The work of opening `group` of `service` on `own`: the schema created or checked,
    /// the key resolved and checked against the group's key check.
    static func openNamespace(
        service: String, group: AccessGroup, keySource: KeySource, configuration: Configuration,
        on own: OwnConnection, logger: Logger
    ) async throws(KeystoreError) -> OpenedNamespace {
        let installed: (call: String, schema: String)
        let lengthsInBytes: Bool
        do {
            (installed, lengthsInBytes) = try await own.run(logger: logger) { connection in
                let installed = try await PostgresSchema.install(on: connection, logger: logger)
                return (installed, try await PostgresSchema.countsBytes(on: connection, logger: logger))
            }
        } catch {
            throw KeystoreError.postgres(error, operation: "creating the schema", configuration: configuration)
        }
        let keys = try await PostgresKeyResolver.keys(
            for: group, source: keySource, configuration: configuration, connection: own, logger: logger)
        try await PostgresKeyCheck.verify(
            service: service, group: group, keys: keys, configuration: configuration, connection: own, logger: logger)
        return OpenedNamespace(
            namespace: PostgresNamespace(service: service, group: group, keys: keys, keyLengthsInBytes: lengthsInBytes),
            commitCall: installed.call, schema: installed.schema)
    }

    /// Opens the keystore and reads the item under `key` on one connection, then closes it:
    /// for a process that reads one item and exits (`federate credentials`, run by AWS SDKs
    /// before their calls), one login where opening a keystore and reading through it take two.
    ///
    /// - Returns: The outcome of the read: the value, `nil` when there is no item, or the
    ///   item's own failure (``KeystoreError/Code/authenticationFailed``,
    ///   ``KeystoreError/Code/corruptFormat``, or the server failing the read), apart from the
    ///   opening's.
    /// - Throws: What ``init(configuration:service:accessGroup:keySource:logger:)`` throws.
    package static func openAndRead(
        key: String,
        configuration: Configuration,
        service: String,
        accessGroup: AccessGroup = .none,
        keySource: KeySource,
        logger: Logger? = nil
    ) async throws(KeystoreError) -> Result<[UInt8]?, KeystoreError> {
        try PostgresNamespace.validate(key: key)
        let quiet = try prepareOpening(service: service, group: accessGroup, configuration: configuration, logger: logger)
        return try await OperationDeadline.run(configuration.operationTimeout, onTimeout: {
            timeout("opening the keystore and reading an item", configuration)
        }) { () throws(KeystoreError) -> Result<[UInt8]?, KeystoreError> in
            try await withOwnConnection(configuration, logger: quiet) { (own) throws(KeystoreError) in
                let opened = try await openNamespace(
                    service: service, group: accessGroup, keySource: keySource, configuration: configuration, on: own, logger: quiet)
                let sealed: [UInt8]?
                do {
                    sealed = try await own.run(logger: quiet) { connection in
                        try await readSealed([key], namespace: opened.namespace, on: connection, logger: quiet)[ItemKey.Exact(key)]
                    }
                } catch {
                    return .failure(KeystoreError.postgres(error, operation: "reading an item", configuration: configuration))
                }
                return Result { () throws(KeystoreError) in try sealed.map { (sealed) throws(KeystoreError) in try opened.namespace.open(sealed, forKey: key) } }
            }
        }
    }
}
