extension SQLiteKeystore {
    /// Whether `accessGroup`'s namespace of `service` has a database under `root`, after the
    /// same checks of the directories and files on the way as an open; nothing is created or
    /// recorded, and no key is resolved (a passphrase's derivation is slow).
    ///
    /// Commands that only read or remove (`federate status`, `credentials`, `clear`) ask this
    /// first: a mistyped access group must not leave a new group's directory, key and database
    /// behind, nor become the service's last group.
    package static func namespaceExists(
        root: String,
        service: String,
        accessGroup: AccessGroup = .none,
        configuration: Configuration = .init()
    ) throws(KeystoreError) -> Bool {
        try configuration.check()
        let layout = try StoreLayout(root: root, service: service, checksWayToRoot: configuration.checksWayToRoot)
        try NameRules.validate(group: accessGroup)
        return try layout.prepareNamespaceFiles(accessGroup, create: false) != nil
    }
}

extension SQLiteKeystore {
    /// Reads of an existing namespace on one connection, for a process that reads a few items
    /// and exits (`federate credentials`, run before every AWS call).
    ///
    /// Opening a ``SQLiteKeystore`` for one read costs what a long-lived one needs: the writer
    /// connection with its schema install, the reader pool's connections, the change feed and
    /// the checkpointer. This opens only the namespace's database, read-only in effect (it
    /// never writes), after the same checks of directories, key and files as a full open.
    ///
    /// It only reads what is already there: when anything a full open would create or record
    /// is missing (directories, key file, database, schema, meta rows, the key check) or the service's last
    /// access group is another, ``open(root:service:accessGroup:keySource:configuration:)``
    /// returns `nil` and the caller opens the keystore, which does all of that as usual.
    package final class SingleReader {
        private let connection: SQLiteConnection
        private let namespace: StoreNamespace

        private init(connection: SQLiteConnection, namespace: StoreNamespace) {
            self.connection = connection
            self.namespace = namespace
        }

        deinit { close() }

        /// Opens `accessGroup`'s namespace under `root` for reading, or `nil` when a full open is
        /// needed first (see above). Throws what opening a ``SQLiteKeystore`` with the same
        /// arguments throws for the same files.
        package static func open(
            root: String,
            service: String,
            accessGroup: AccessGroup = .none,
            keySource: KeySource = .keyFile,
            configuration: Configuration = .init()
        ) throws(KeystoreError) -> SingleReader? {
            // The same steps, in the same order, as SQLiteKeystore.init and recordGroup, with
            // nothing created: the first failing check throws the same error.
            try configuration.check()
            try KeystoreError.rethrowing { try CryptoRuntime.ensureInitialised() }
            let layout = try StoreLayout(root: root, service: service, checksWayToRoot: configuration.checksWayToRoot)
            try NameRules.validate(group: accessGroup)
            // A named group's reader needs the private database's record of the last group,
            // not the private key (as recordGroup): none is resolved, a passphrase's included.
            let privateStore: StoreNamespace?
            let privatePath: String
            if accessGroup == .none {
                guard let opened = try StoreNamespace.open(layout: layout, group: .none, keySource: keySource, create: .nothing)
                else { return nil }
                (privateStore, privatePath) = (opened, opened.databasePath)
            } else {
                guard let path = try layout.prepareNamespaceFiles(.none, create: false) else { return nil }
                (privateStore, privatePath) = (nil, path)
            }
            let privateConnection = try SQLiteConnection(path: privatePath, busyTimeout: configuration.busyTimeout)
            do throws(KeystoreError) {
                guard try StoreSchema.isInstalled(on: privateConnection, service: service, group: .none),
                      let recorded = try StoreSchema.meta(lastGroupName, on: privateConnection),
                      let last = StoreSchema.decodeGroup(recorded), last == accessGroup
                else {
                    privateConnection.close()
                    return nil
                }
                if let privateStore {
                    guard try privateStore.verifyStoredKeyForReading(on: privateConnection, service: service) else {
                        privateConnection.close()
                        return nil
                    }
                    return SingleReader(connection: privateConnection, namespace: privateStore)
                }
                privateConnection.close()
            } catch {
                privateConnection.close()
                throw error
            }
            guard let namespace = try StoreNamespace.open(layout: layout, group: accessGroup, keySource: keySource, create: .nothing)
            else { return nil }
            let connection = try SQLiteConnection(path: namespace.databasePath, busyTimeout: configuration.busyTimeout)
            do throws(KeystoreError) {
                guard try StoreSchema.isInstalled(on: connection, service: service, group: accessGroup),
                      try namespace.verifyStoredKeyForReading(on: connection, service: service)
                else {
                    connection.close()
                    return nil
                }
            } catch {
                connection.close()
                throw error
            }
            return SingleReader(connection: connection, namespace: namespace)
        }

        /// As ``SQLiteKeystore/value(forKey:)``: the value stored under `key`, or `nil`.
        ///
        /// - Throws: ``KeystoreError/Code/authenticationFailed`` or
        ///   ``KeystoreError/Code/corruptFormat`` for this item alone when it cannot be opened;
        ///   other codes when the database cannot be read.
        package func value(forKey key: String) throws(KeystoreError) -> [UInt8]? {
            try StoreNamespace.validate(key: key)
            return try SQLiteKeystore.value(forKey: key, on: connection, namespace: namespace)
        }

        /// Closes the connection; later reads fail with ``KeystoreError/Code/storeUnavailable``.
        package func close() {
            connection.close()
        }
    }
}
