/// An error thrown by a ``Keystore``.
///
/// Like async-http-client's `HTTPClientError`, the error is a struct with a ``Code`` whose
/// cases are static members, so new codes can be added without breaking callers who
/// `switch` on them. Compare codes with `==`:
///
/// ```swift
/// do { _ = try await keystore.value(forKey: "session") }
/// catch where error.code == .authenticationFailed { … }
/// ```
///
/// An error never carries secret material: no key bytes, no passphrase, no item value.
/// It may carry a file-system path (a database, key file or directory) and the name of an
/// item, which are not secret.
public struct KeystoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, as an extensible set of codes.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case itemNotFound
            case authenticationFailed
            case insecurePermissions
            case corruptFormat
            case io
            case invalidKey
            case invalidName
            case cryptoFailure
            case migrationFailed
            case storeUnavailable
            case valueTooLarge
            case invalidConfiguration
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The requested item does not exist.
        public static let itemNotFound = Code(.itemNotFound)
        /// An item failed to open: it was tampered with, moved under another name, service
        /// or access group, or sealed with another key. A migration throws it, before moving
        /// anything, when some source items fail to open; its reason says how many.
        public static let authenticationFailed = Code(.authenticationFailed)
        /// A directory, database or key file is more permissive than the keystore allows, is not
        /// a regular file or directory (a symbolic link, a FIFO), or is owned
        /// by another user. The error's ``KeystoreError/path`` and ``KeystoreError/mode`` say
        /// which file and what was found.
        public static let insecurePermissions = Code(.insecurePermissions)
        /// An item, a salt file or a database has an unknown format version, is truncated, or
        /// is otherwise malformed (a corrupt database file, a database of another service, a
        /// schema the keystore did not make, a stored item larger than the engine reads).
        public static let corruptFormat = Code(.corruptFormat)
        /// A value to write is larger than the engine stores (``SQLiteKeystore``: 1 MiB
        /// sealed, which is the value plus 29 bytes). Nothing was written.
        public static let valueTooLarge = Code(.valueTooLarge)
        /// A system call failed; ``KeystoreError/errno`` and ``KeystoreError/path`` say which.
        public static let io = Code(.io)
        /// The key source gave no usable key: missing or malformed environment variable,
        /// wrong length, or a key file of the wrong size; or a key that is not the one the
        /// namespace's items are sealed with (it does not open the namespace's key check, or
        /// its key file or salt is missing where items are sealed).
        public static let invalidKey = Code(.invalidKey)
        /// An item key, service name or access-group name is empty or too long.
        public static let invalidName = Code(.invalidName)
        /// libcrypto failed unexpectedly; ``KeystoreError/openSSLError`` holds `ERR_get_error()`.
        public static let cryptoFailure = Code(.cryptoFailure)
        /// A migration copied an item but could not read it back identically; its copy
        /// transaction is rolled back, the source keeps every item, and running the migration
        /// again retries it.
        public static let migrationFailed = Code(.migrationFailed)
        /// The store could not be reached or opened: it stayed busy past the configured
        /// timeout, its database could not be opened, or it was closed. Retrying later may
        /// succeed; nothing was written.
        public static let storeUnavailable = Code(.storeUnavailable)

        /// A configuration value no store can work with: a timeout or interval that is not
        /// positive, a port outside 1–65535, an empty host or user name. Nothing was opened.
        public static let invalidConfiguration = Code(.invalidConfiguration)

        /// The code's name, for example `authenticationFailed`.
        public var description: String { base.rawValue }
    }

    /// What went wrong.
    public let code: Code
    /// The file or directory involved, when there is one.
    public let path: String?
    /// The `errno` of the failing system call, for ``Code/io`` and some other codes.
    public let errno: Int32?
    /// The permission bits found, for ``Code/insecurePermissions``.
    public let mode: UInt32?
    /// The first OpenSSL error code (`ERR_get_error()`), for ``Code/cryptoFailure``.
    public let openSSLError: UInt?
    /// A fixed, non-secret explanation.
    public let reason: String

    /// Creates an error; backends outside this module use it to report their own failures.
    ///
    /// - Parameters:
    ///   - code: What went wrong.
    ///   - reason: A fixed explanation; it must never contain secret material (keys,
    ///     passphrases, item values). Control and bidirectional formatting characters in it
    ///     (from a planted name, or a server's message quoting one) are kept as `\u{…}`
    ///     escapes.
    ///   - path: The file or directory involved, if any.
    ///   - errno: The `errno` of the failing system call, if any.
    ///   - mode: The permission bits found, for ``Code/insecurePermissions``.
    ///   - openSSLError: The first OpenSSL error code, for ``Code/cryptoFailure``.
    public init(
        _ code: Code,
        _ reason: String,
        path: String? = nil,
        errno: Int32? = nil,
        mode: UInt32? = nil,
        openSSLError: UInt? = nil
    ) {
        self.code = code
        self.reason = reason.escapingControlCharacters
        self.path = path
        self.errno = errno
        self.mode = mode
        self.openSSLError = openSSLError
    }

    /// A one-line, secret-free description: code, reason, and any path, mode and errno.
    public var description: String {
        var text = "KeystoreError.\(code): \(reason)"
        if let path { text += " (path: \(path))" }
        if let mode { text += " (mode: 0\(String(mode & 0o7777, radix: 8)))" }
        if let errno { text += " (errno \(errno): \(Self.describe(errno: errno)))" }
        if let openSSLError { text += " (openssl error 0x\(String(openSSLError, radix: 16)))" }
        return text
    }
}

extension KeystoreError {
    /// What the reason of a database keystore's refusal says of a server that is a standby,
    /// for a front end's advice (point the keystore at the primary).
    package static let standbyServerReason = "the server is a standby (in recovery)"
    /// What it says of a server, database or role that refuses writes (SQLSTATE 25006).
    package static let readOnlyServerReason = "the server or the role is read-only"
    /// What every engine's refusal of a key that is not the namespace's says, for a front
    /// end's advice (which key to give).
    package static let wrongKeyReason = "every process must use the key its items"
    /// What it says when the key file or passphrase salt is missing over sealed items: the
    /// sessions were sealed with another kind of key, or the file was deleted.
    package static let keyMissingReason = "a key made now would open none of them"
    /// What it says when only a key that opens (not the sealing one) opens the key check: a
    /// rotation has not run yet.
    package static let notRotatedYetReason = "rotate it to the sealing key first"
}
