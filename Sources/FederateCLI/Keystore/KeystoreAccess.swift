package import Federation
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SecureStorage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the CLI keeps sessions, and how it opens them, whichever the engine.
///
/// - Location: `--keystore`, else `$IDENTITY_BROKER_KEYSTORE`, else `$XDG_DATA_HOME/identity-broker`
///   (an absolute `XDG_DATA_HOME` only, per the XDG spec), else `$HOME/.local/share/identity-broker`
///   (the password database's home when `HOME` is unset). A value starting with `postgres://` or
///   `postgresql://` names a PostgreSQL database (``KeystoreLocation/postgres(_:)``); anything
///   else is a directory for the embedded SQLite engine.
/// - Key: see ``KeySelection``.
/// - Namespace: service ``service``, access group `--access-group` (private when omitted).
///
/// Commands only see ``open(for:)``, ``client(configuration:)``, ``offlineClient(expiryMargin:use:)``,
/// ``migrate(from:to:)`` and ``rekey()``. The PostgreSQL branch goes through ``ServerSide``: only
/// `federate-server` links PostgresKeystore (and so NIO); `federate` hands such a run to it.
package struct KeystoreAccess {
    /// How long a command keeps the keystore open, which decides what opening it prepares.
    package enum KeystoreUse: Sendable {
        /// A call or two, then the process exits: the client does not follow other
        /// processes' changes, and a PostgreSQL pool keeps no idle connection (one login for
        /// the opening, one for the call).
        case oneShot
        /// Until a signal (`exec`, `serve`): the client follows other processes' changes, and a
        /// PostgreSQL pool keeps its default idle connections.
        case longRunning
    }

    /// The fixed service name the CLI's items live under.
    static let service = "identity-broker"
    /// The environment variable naming the keystore directory or database URL.
    package static let keystoreVariable = "IDENTITY_BROKER_KEYSTORE"

    let location: KeystoreLocation
    /// How messages name the keystore: the directory, or the database URL without its password.
    package let root: String
    let accessGroup: AccessGroup
    let keySource: KeySource
    /// The SQLite engine's settings: the defaults, with the way-to-root check off only when
    /// ``wayToRootCheckVariable`` says so.
    let sqliteConfiguration: SQLiteKeystore.Configuration
    let logger: Logger?

    package init(_ options: KeystoreOptions) throws(CLIFailure) {
        try self.init(keystore: options.keystore, accessGroup: options.accessGroup, logger: options.logger)
    }

    package init(_ options: CommonOptions) throws(CLIFailure) {
        try self.init(options.store)
    }

    init(keystore: String?, accessGroup: String?, logger: Logger?) throws(CLIFailure) {
        let value = try Self.resolveRoot(explicit: keystore)
        location = try KeystoreLocation(value)
        root = location.displayName
        self.accessGroup = Self.group(accessGroup)
        keySource = try KeySelection.keySource(for: location)
        sqliteConfiguration = try Self.sqliteConfiguration()
        self.logger = logger
    }

    /// Set to `off` in a container whose volume no other user shares (a Kubernetes
    /// `emptyDir` is 0777, not sticky): the directories and links on the way to the keystore
    /// directory are then not checked (``SQLiteKeystore/Configuration/checksWayToRoot``); its
    /// owner, its mode and everything in it still are.
    package static let wayToRootCheckVariable = "IDENTITY_BROKER_WAY_TO_ROOT_CHECK"

    static func sqliteConfiguration() throws(CLIFailure) -> SQLiteKeystore.Configuration {
        var configuration = SQLiteKeystore.Configuration()
        switch environment(wayToRootCheckVariable) {
        case nil, "on": break
        case "off": configuration.checksWayToRoot = false
        case _?:
            throw CLIFailure(.usage, "\(wayToRootCheckVariable) is neither on nor off; set it to off only in a container no other user shares, else unset it")
        }
        return configuration
    }

    /// `nil` or `none` → private; anything else a named group (no migration on open:
    /// moving items is `federate migrate`'s job).
    static func group(_ name: String?) -> AccessGroup {
        guard let name, name != "none" else { return .none }
        return AccessGroup(name: name)
    }

    static func resolveRoot(explicit: String?) throws(CLIFailure) -> String {
        if let explicit { return try unexpandedHomeRefused(explicit, source: "--keystore") }
        if let value = environment(keystoreVariable) { return try unexpandedHomeRefused(value, source: "$\(keystoreVariable)") }
        if let data = environment("XDG_DATA_HOME"), data.hasPrefix("/") { return data + "/identity-broker" }
        guard let home = environment("HOME") ?? passwordHome() else {
            throw CLIFailure(.usage, "no keystore directory: HOME is not set; pass --keystore DIR or set \(keystoreVariable)")
        }
        var trimmed = Substring(home)
        while trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard !trimmed.isEmpty || access("/", W_OK) == 0 else {
            // A user without a home of its own (an arbitrary UID in a container, systemd's
            // DynamicUser=): the keystore would go to /.local/share, which it cannot create.
            throw CLIFailure(
                .usage, "no keystore directory: HOME is / (a user without a home directory, as in many containers); "
                    + "pass --keystore DIR or set \(keystoreVariable)")
        }
        return trimmed + "/.local/share/identity-broker"
    }

    /// `value`, unless it starts with `~`: no shell expands it inside quotes, in
    /// `--keystore=~/ks`, or in a systemd unit's `Environment=`, and taken as is it would make a
    /// directory named `~` in the working directory and keep sessions there.
    private static func unexpandedHomeRefused(_ value: String, source: String) throws(CLIFailure) -> String {
        guard value.hasPrefix("~") else { return value }
        throw CLIFailure(
            .usage,
            "\(source) starts with '~', which nothing expanded here (a shell expands it only at the start of an unquoted word); "
                + "write the home directory out, as \"$HOME/…\"; for a directory named '~…', write ./~…")
    }

    /// Whether the keystore exists at all. A database always counts as existing (opening it
    /// creates nothing but the schema).
    package var rootExists: Bool {
        switch location {
        case .directory(let path):
            var info = stat()
            return stat(path, &info) == 0
        case .postgres:
            return true
        }
    }

    /// What to tell a person whose read found nothing because nothing is where they looked
    /// (a mistyped `--keystore` or `--access-group`): `nil` when the namespace exists, and
    /// always for a database, where every name exists.
    package func absenceNote() throws(CLIFailure) -> String? {
        guard !(try namespaceExists()) else { return nil }
        guard rootExists else { return "keystore \(root) does not exist: nothing was ever saved there (check --keystore)" }
        guard accessGroup.name == nil else { return "\(placeName) does not exist (check --access-group and --keystore)" }
        // The directory exists (a shared keystore others use, one made with mkdir): only this
        // user's own namespace is missing.
        return "nothing of yours is saved in keystore \(root) yet (check --keystore)"
    }

    /// Whether the access group's namespace exists, checked as an open checks it; commands that
    /// only read or remove skip opening when it does not, which would create the group's
    /// directory, key and database (a mistyped `--access-group`) and record it as the last
    /// group. A database always counts as existing.
    package func namespaceExists() throws(CLIFailure) -> Bool {
        guard case .directory(let path) = location else { return true }
        guard rootExists else { return false }
        do {
            return try SQLiteKeystore.namespaceExists(
                root: path, service: Self.service, accessGroup: accessGroup, configuration: sqliteConfiguration)
        } catch {
            throw CLIFailure.keystore(error, root: root)
        }
    }

    /// Where a missing session was looked for, for messages: the keystore, and the access
    /// group when one is named (a mistyped group holds nothing).
    package var placeName: String {
        guard let group = accessGroup.name else { return "keystore \(root)" }
        return "access group '\(group)' of keystore \(root)"
    }

    /// Opens (creating on first use) the keystore for `use`. A PostgreSQL keystore is
    /// registered with ``OpenKeystores`` so that the process closes it before it exits.
    func open(for use: KeystoreUse) async throws(CLIFailure) -> any Keystore {
        switch location {
        case .directory(let path):
            do {
                return try SQLiteKeystore(
                    root: path, service: Self.service, accessGroup: accessGroup, keySource: keySource,
                    configuration: sqliteConfiguration, logger: logger)
            } catch {
                throw CLIFailure.keystore(error, root: root)
            }
        case .postgres(let target):
            return try await target.open(service: Self.service, accessGroup: accessGroup, keySource: keySource, use: use, logger: logger)
        }
    }

    /// Rotates the key of the access group to the sealing key (``KeySelection``): every item
    /// an `OTHER` key opens is re-sealed with it.
    func rekey() async throws(CLIFailure) -> KeyRotation {
        let context = "cannot rotate the key of access group \(accessGroup) (the current key seals; the old one goes in \(KeySelection.otherKeyVariables))"
        switch location {
        case .directory(let path):
            do {
                return try await SQLiteKeystore.rekey(
                    root: path, service: Self.service, group: accessGroup, keySource: keySource,
                    configuration: sqliteConfiguration, logger: logger)
            } catch {
                throw CLIFailure.keystore(error, root: root, context: context)
            }
        case .postgres(let database):
            return try await database.rekey(service: Self.service, group: accessGroup, keySource: keySource, logger: logger, context: context)
        }
    }

    /// Moves every saved session from access group `from` to `to`; how many moved.
    func migrate(from source: AccessGroup, to target: AccessGroup) async throws(CLIFailure) -> Int {
        let context = "cannot migrate from access group \(source) to \(target)"
        switch location {
        case .directory(let path):
            do {
                return try await SQLiteKeystore.migrate(
                    root: path, service: Self.service, from: source, to: target, keySource: keySource,
                    configuration: sqliteConfiguration, logger: logger)
            } catch {
                // Source items that do not open stop the migration before anything moves; the
                // error's reason says how many and why.
                throw CLIFailure.keystore(error, root: root, context: context)
            }
        case .postgres(let database):
            return try await database.migrate(
                service: Self.service, from: source, to: target, keySource: keySource, logger: logger, context: context)
        }
    }

    /// A client that federates with `configuration` over the opened keystore. The
    /// configuration comes checked from ``Exchange/configuration(_:poolId:flow:)``, so a usage
    /// error (exit 2) has created no keystore.
    func client(configuration: FederationConfiguration) async throws(CLIFailure) -> FederationClient {
        let keystore = try await open(for: .oneShot)
        let client: FederationClient
        do {
            client = try FederationClient(configuration: configuration, keystore: keystore, logger: logger)
        } catch {
            throw CLIFailure.federation(error, root: root)
        }
        await client.stopFollowingStoreChanges()
        return client
    }

    /// A client for the commands that never reach the network (`credentials`, `status`,
    /// `clear`, and the credential server of `exec` and `serve`): it reads saved sessions
    /// without any pool configuration, and follows other processes' changes only for a
    /// ``KeystoreUse/longRunning`` use.
    package func offlineClient(expiryMargin: Duration, use: KeystoreUse = .oneShot) async throws(CLIFailure) -> FederationClient {
        let client = FederationClient(keystore: try await open(for: use), expiryMargin: expiryMargin, logger: logger)
        if use == .oneShot { await client.stopFollowingStoreChanges() }
        return client
    }

    /// The saved `session`; when the access group's namespace does not exist yet,
    /// `notFederated`, and nothing is created or recorded. A damaged item fails this session only (exit 6).
    func savedSession(_ session: String, expiryMargin: Duration) async throws(CLIFailure) -> SessionSnapshot {
        if let snapshot = try savedSessionAtOnce(session, expiryMargin: expiryMargin) { return snapshot }
        if logger == nil, case .postgres(let target) = location {
            return try await savedSessionInOneLogin(session, expiryMargin: expiryMargin, from: target)
        }
        let client = try await offlineClient(expiryMargin: expiryMargin)
        do {
            return try await client.session(session)
        } catch {
            throw CLIFailure.federation(error, root: root)
        }
    }

    /// ``savedSession(_:expiryMargin:)`` without a client, on one SQLite connection at most
    /// (the cache hit an SDK's `credential_process` runs before every AWS call): `nil` when the
    /// keystore must be opened in full (a database, something to create or record, `--verbose`,
    /// whose debug lines come from the full open). Errors are the full path's, phase by phase:
    /// opening as ``open()``'s, reading as the client's.
    func savedSessionAtOnce(_ session: String, expiryMargin: Duration) throws(CLIFailure) -> SessionSnapshot? {
        let absent = SessionSnapshot(name: session, state: .notFederated)
        guard rootExists else { return absent }
        // The reader's checks first (the common case, before every AWS call, pays them once);
        // when it declines, a namespace that does not exist is not opened (which would make it).
        guard logger == nil, case .directory(let path) = location, let reader = try singleReader(path) else {
            return try namespaceExists() ? nil : absent
        }
        defer { reader.close() }
        do {
            return try FederationClient.savedSession(session, expiryMargin: expiryMargin) { (key) throws(KeystoreError) in
                try reader.value(forKey: key)
            }
        } catch {
            throw CLIFailure.federation(error, root: root)
        }
    }

    /// ``savedSession(_:expiryMargin:)`` from a database, opened and read on one connection
    /// (one login, where opening a keystore and reading through its pool take two). Errors
    /// keep their phase, as ``savedSessionAtOnce(_:expiryMargin:)``'s do.
    private func savedSessionInOneLogin(
        _ session: String, expiryMargin: Duration, from target: any PostgresTarget
    ) async throws(CLIFailure) -> SessionSnapshot {
        do {
            try SessionName.validate(session)
        } catch {
            throw CLIFailure.federation(error, root: root)
        }
        let read = try await target.openAndRead(
            key: FederationClient.storeKey(ofSession: session), service: Self.service, accessGroup: accessGroup,
            keySource: keySource, logger: logger)
        do {
            return try FederationClient.savedSession(session, expiryMargin: expiryMargin) { (_) throws(KeystoreError) in try read.get() }
        } catch {
            throw CLIFailure.federation(error, root: root)
        }
    }

    /// The one-connection reader of the namespace, or `nil` when a full open is needed.
    private func singleReader(_ path: String) throws(CLIFailure) -> SQLiteKeystore.SingleReader? {
        do {
            return try SQLiteKeystore.SingleReader.open(
                root: path, service: Self.service, accessGroup: accessGroup, keySource: keySource,
                configuration: sqliteConfiguration)
        } catch {
            throw CLIFailure.keystore(error, root: root)
        }
    }

    package static func environment(_ name: String) -> String? {
        guard let value = getenv(name), value.pointee != 0 else { return nil }
        return String(cString: value)
    }

    /// `$HOME`, else the user's home directory from the password database.
    package static var homeDirectory: String? { environment("HOME") ?? passwordHome() }

    private static func passwordHome() -> String? {
        guard let entry = getpwuid(getuid()), let directory = entry.pointee.pw_dir, directory.pointee != 0 else { return nil }
        return String(cString: directory)
    }
}

/// Where the keystore lives: a directory (SQLite) or a PostgreSQL database.
enum KeystoreLocation {
    case directory(String)
    case postgres(any PostgresTarget)

    /// Parses a `--keystore` value; a URL's password is registered with ``Terminal`` first,
    /// so no stderr line can show it, and never appears in an error.
    init(_ value: String) throws(CLIFailure) {
        if Self.isDatabaseURL(value) {
            self = .postgres(try ActiveServerSide.current.postgresTarget(url: value))
        } else if let start = Self.mistypedDatabaseScheme(value) {
            // Taken for a directory, `postgres:/alice:pw@db/x` would keep sessions in a
            // relative path named after the password, and quote it in every error.
            throw CLIFailure(
                .usage,
                "--keystore: a value starting with '\(start)' is taken for a PostgreSQL URL, but it does not start with 'postgres://' or 'postgresql://' "
                    + "(postgres://user:password@host:port/database); for a directory of that name, write ./\(start)…")
        } else if Self.looksLikeAConnectionString(value) {
            // libpq's other form (`host=db user=alice password=…`): as a directory it would be
            // quoted, password and all, in every error, and made at a first login.
            throw CLIFailure(
                .usage,
                "--keystore: the value looks like a PostgreSQL connection string ('keyword=value' pairs); --keystore takes a directory "
                    + "or a URL (postgres://user:password@host:port/database); for a directory of that name, write ./…")
        } else if let scheme = value.firstRange(of: "://"), !value[..<scheme.lowerBound].contains("/") {
            throw CLIFailure(.usage, "--keystore takes a directory or a postgres:// URL; '\(value[..<scheme.lowerBound])://' is not supported")
        } else {
            self = .directory(value)
        }
    }

    /// Whether a `--keystore` value (or a ``displayName``) names a PostgreSQL database.
    static func isDatabaseURL(_ value: String) -> Bool {
        value.hasPrefix("postgres://") || value.hasPrefix("postgresql://")
    }

    /// The start of a value meant as a PostgreSQL URL but written wrong (`postgres:/…`,
    /// `postgresql:…`, `POSTGRES://…`, `postgres//…`), as the value has it: the scheme and
    /// the `:` or `/` after it; `nil` for anything else (`./postgres/…` names a directory, as
    /// a relative `postgres/…` would, which is refused for `postgres//…`'s sake).
    static func mistypedDatabaseScheme(_ value: String) -> Substring? {
        guard !isDatabaseURL(value), let end = value.firstIndex(where: { $0 == ":" || $0 == "/" }) else { return nil }
        return ["postgres", "postgresql"].contains(value[..<end].lowercased()) ? value[...end] : nil
    }

    /// Whether a value that does not start like a path holds one of libpq's connection
    /// keywords followed by `=` (spaces allowed around it), at the start or after a space.
    static func looksLikeAConnectionString(_ value: String) -> Bool {
        guard !ArgumentShape.startsLikeAPath(value) else { return false }
        let keywords: Set<Substring> = ["host", "hostaddr", "port", "dbname", "user", "password", "passfile", "sslmode", "service", "options"]
        var words = value.lowercased().split(whereSeparator: { $0 == " " || $0 == "\t" })[...]
        while let word = words.popFirst() {
            if let equals = word.firstIndex(of: "=") {
                if keywords.contains(word[..<equals]) { return true }
            } else if keywords.contains(word), words.first?.first == "=" {
                return true
            }
        }
        return false
    }

    /// The directory, or the URL without its password.
    var displayName: String {
        switch self {
        case .directory(let path): path
        case .postgres(let target): target.displayName
        }
    }
}

/// Which key the CLI opens the keystore with.
///
/// 1. `$IDENTITY_BROKER_KEY`: 32 bytes in canonical base64, the same for every group.
/// 2. `$IDENTITY_BROKER_PASSPHRASE`: a key derived with scrypt from the passphrase and a salt
///    per access group (kept next to the key file for a directory, in the database for
///    PostgreSQL, so every instance derives the same key).
/// 3. A directory: the key file the keystore keeps per access group. A database: the key file
///    named by `$IDENTITY_BROKER_KEY_FILE` (32 bytes, the same file on every instance); without
///    one of the three, opening fails with exit 6: a key made up per host would differ between
///    the instances sharing the database.
///
/// That key seals. Other keys that only open (``KeySource/alsoOpening(_:)``), for a key
/// rotation, come from `$IDENTITY_BROKER_OTHER_KEY`, `$IDENTITY_BROKER_OTHER_PASSPHRASE` and
/// `$IDENTITY_BROKER_OTHER_KEY_FILE` (a path), any of them.
package enum KeySelection {
    static let passphraseVariable = "IDENTITY_BROKER_PASSPHRASE"
    package static let keyFileVariable = "IDENTITY_BROKER_KEY_FILE"
    static let otherKeyVariable = "IDENTITY_BROKER_OTHER_KEY"
    static let otherPassphraseVariable = "IDENTITY_BROKER_OTHER_PASSPHRASE"
    static let otherKeyFileVariable = "IDENTITY_BROKER_OTHER_KEY_FILE"
    /// The variables that give keys that only open, as `rekey`'s messages name them.
    static let otherKeyVariables = "$\(otherKeyVariable), $\(otherPassphraseVariable) or $\(otherKeyFileVariable)"

    /// The variables whose values are secrets: the keystore keys and the passphrases they are
    /// derived from (the key file variables hold paths, not secrets).
    package static let secretVariables = [KeySource.defaultEnvironmentVariable, passphraseVariable, otherKeyVariable, otherPassphraseVariable]

    /// Every variable that gives a key, a passphrase or a key file.
    static let keyVariables = [
        KeySource.defaultEnvironmentVariable, passphraseVariable, keyFileVariable, otherKeyVariable, otherPassphraseVariable, otherKeyFileVariable,
    ]

    /// Whether any `OTHER` variable gives a key that only opens.
    static var givesKeysThatOnlyOpen: Bool {
        [otherKeyVariable, otherPassphraseVariable, otherKeyFileVariable].contains { KeystoreAccess.environment($0) != nil }
    }

    static func keySource(for location: KeystoreLocation) throws(CLIFailure) -> KeySource {
        try refuseEmptyKeyVariables(location: location)
        return try sealingSource(for: location).alsoOpening(contentsOf: try otherSources(for: location))
    }

    /// A key variable set to nothing is refused rather than read as unset: it is what
    /// `IDENTITY_BROKER_KEY="$(cat /run/secrets/missing)"` gives, and read as unset it would
    /// seal a first login with a key file made on the spot, which the real key never opens.
    private static func refuseEmptyKeyVariables(location: KeystoreLocation) throws(CLIFailure) {
        for name in keyVariables {
            // $IDENTITY_BROKER_KEY_FILE is read for a database only (a directory keeps its own).
            if name == keyFileVariable, case .directory = location { continue }
            guard let value = getenv(name), value.pointee == 0 else { continue }
            throw CLIFailure(
                .keystore,
                "keystore at \(location.displayName): $\(name) is set but empty (a secret that did not load?); give it a value, or unset it")
        }
    }

    private static func sealingSource(for location: KeystoreLocation) throws(CLIFailure) -> KeySource {
        let key = KeystoreAccess.environment(KeySource.defaultEnvironmentVariable)
        let passphrase = KeystoreAccess.environment(passphraseVariable)
        if let key { Terminal.neverShow(key) }
        if let passphrase { Terminal.neverShow(passphrase) }
        if key != nil, passphrase != nil {
            throw CLIFailure(.usage, "both $\(KeySource.defaultEnvironmentVariable) and $\(passphraseVariable) are set; set only one of them")
        }
        if key != nil {
            try requireWellFormedKey(in: KeySource.defaultEnvironmentVariable, location: location)
            return .environment()
        }
        if let passphrase { return .passphrase(passphrase) }
        guard case .postgres(let target) = location else { return .keyFile }
        guard target.keyFilePath != nil else {
            throw CLIFailure(
                .keystore,
                "keystore at \(target.displayName): no key for a PostgreSQL keystore; set $\(KeySource.defaultEnvironmentVariable) (32 random bytes in base64, as 'openssl rand -base64 32' prints them), $\(passphraseVariable) or $\(keyFileVariable), the same on every instance")
        }
        return .keyFile
    }

    /// The keys that only open, from the `OTHER` variables that are set.
    private static func otherSources(for location: KeystoreLocation) throws(CLIFailure) -> [KeySource] {
        var others: [KeySource] = []
        if let key = KeystoreAccess.environment(otherKeyVariable) {
            Terminal.neverShow(key)
            try requireWellFormedKey(in: otherKeyVariable, location: location)
            others.append(.environment(variable: otherKeyVariable))
        }
        if let passphrase = KeystoreAccess.environment(otherPassphraseVariable) {
            Terminal.neverShow(passphrase)
            others.append(.passphrase(passphrase))
        }
        if let path = KeystoreAccess.environment(otherKeyFileVariable) {
            do {
                others.append(try KeySource.keyFile(at: path))
            } catch where error.errno == ENOENT {
                throw CLIFailure(
                    .keystore,
                    "keystore at \(location.displayName): $\(otherKeyFileVariable) names \(path), which does not exist; name the key file that sealed the sessions (a copy of it you own, as docs/cli.md's rekey says)")
            } catch {
                throw CLIFailure.keystore(error, root: location.displayName, context: "cannot read $\(otherKeyFileVariable)")
            }
        }
        return others
    }

    /// Refuses, before anything is opened or created, a key variable that is not 32 bytes in
    /// canonical base64: every command, `status` on a keystore that does not exist yet too,
    /// says so (exit 6) rather than only the first one that writes.
    private static func requireWellFormedKey(in variable: String, location: KeystoreLocation) throws(CLIFailure) {
        do {
            _ = try KeySource.environmentKey(variable: variable)
        } catch {
            throw CLIFailure(
                .keystore,
                "keystore at \(location.displayName): \(error.reason); set $\(variable) to 32 random bytes in canonical base64, as 'openssl rand -base64 32' prints them")
        }
    }

    /// What to do about a key the keystore refused, for the key this run gave: a key that is
    /// not the one the sessions were sealed with is not fixed by making up a new one.
    static func advice(forRefusedKey error: KeystoreError) -> String {
        let reason = error.reason
        let rotation = "to change the key of stored sessions, rotate it: federate rekey (docs/cli.md)"
        if reason.contains(KeystoreError.notRotatedYetReason) {
            return "run 'federate rekey' with the old key in \(otherKeyVariables) first, or keep sealing with the old key (and opening with the new one) until then"
        }
        if reason.contains(KeystoreError.keyMissingReason) {
            if givesKeysThatOnlyOpen {
                // The key file moved aside for a rotation (docs/cli.md, rekey): the rotation makes the new one.
                return "if the key was moved aside to be replaced, finish the rotation: run 'federate rekey' with the old key in \(otherKeyVariables); "
                    + "otherwise set the key that sealed these sessions ($\(KeySource.defaultEnvironmentVariable) or $\(passphraseVariable)), or restore the key file"
            }
            if KeystoreAccess.environment(passphraseVariable) != nil {
                return "these sessions were not sealed with a passphrase (there is no salt file): if they were sealed with"
                    + " $\(KeySource.defaultEnvironmentVariable), set it instead of $\(passphraseVariable); if with the key file, unset $\(passphraseVariable)"
            }
            return "these sessions were sealed with $\(KeySource.defaultEnvironmentVariable) or $\(passphraseVariable) (no key file exists):"
                + " set the one that sealed them; if the key file was deleted, restore it from a backup"
        }
        if reason.contains(KeystoreError.wrongKeyReason) {
            let given: String
            if KeystoreAccess.environment(KeySource.defaultEnvironmentVariable) != nil {
                given = "$\(KeySource.defaultEnvironmentVariable) is not the key these sessions were sealed with: give that key"
                    + " (or, if they were sealed with a passphrase or the key file, set $\(passphraseVariable) or unset $\(KeySource.defaultEnvironmentVariable))"
            } else if KeystoreAccess.environment(passphraseVariable) != nil {
                given = "$\(passphraseVariable) is not the passphrase these sessions were sealed with: give that passphrase"
                    + " (or, if they were sealed with $\(KeySource.defaultEnvironmentVariable) or the key file, set that instead)"
            } else {
                given = "the key file is not the key these sessions were sealed with: if they were sealed with"
                    + " $\(KeySource.defaultEnvironmentVariable) or $\(passphraseVariable), set it; if the key file was replaced, restore the one that sealed them"
            }
            return given + "; " + rotation + "; if the key that sealed them is lost, nothing opens them again: start over in another keystore (another --keystore, or this directory moved aside) and log in again"
        }
        if reason.hasPrefix("environment variable") {
            return "set it to 32 random bytes in canonical base64, as 'openssl rand -base64 32' prints them"
        }
        return "check $\(KeySource.defaultEnvironmentVariable), $\(passphraseVariable) or the key file (" + rotation + ")"
    }
}

extension KeySource {
    /// ``alsoOpening(_:)`` with an array.
    fileprivate func alsoOpening(contentsOf others: [KeySource]) -> KeySource {
        others.reduce(self) { $0.alsoOpening($1) }
    }
}
