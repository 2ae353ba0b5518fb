#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where a keystore's files live under its root, and the permission rules for each.
///
/// ```
/// <root>/                                 0700 (0770+setgid once a shared group uses it)
///   state/<service>.svc/                  last-group, migration.journal, .lock
///   private/<service>.svc/                AccessGroup.none: 0700, key/salt and items 0600
///   shared/<group>.group/                 named group: 0770+setgid, key/salt 0640
///   shared/<group>.group/<service>.svc/   the service's items in that group, 0640
/// ```
/// Every variable name component is unpadded base64url of its UTF-8 bytes plus a suffix, so
/// no name can traverse paths or collide with the fixed names (`key`, `salt`, `.lock`, `.tmp.*`).
struct KeystoreLayout: Sendable {
    let root: String
    let service: String
    let encodedService: String

    static let maximumNameBytes = 150
    static let maximumKeyBytes = 180

    init(root: String, service: String) throws {
        try Self.validate(name: service, what: "service name", limit: Self.maximumNameBytes)
        guard !root.isEmpty else { throw KeystoreError(.invalidName, "the keystore root is empty") }
        var trimmed = root
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        self.root = trimmed
        self.service = service
        self.encodedService = Base64.urlEncode(service.utf8) + ".svc"
    }

    static func validate(name: String, what: String, limit: Int) throws {
        let count = name.utf8.count
        guard count > 0 else { throw KeystoreError(.invalidName, "the \(what) is empty") }
        guard count <= limit else { throw KeystoreError(.invalidName, "the \(what) is longer than \(limit) bytes") }
    }

    // MARK: Paths

    var stateDirectory: String { "\(root)/state/\(encodedService)" }
    var lastGroupPath: String { "\(stateDirectory)/last-group" }
    var journalPath: String { "\(stateDirectory)/migration.journal" }
    var serviceLockPath: String { "\(stateDirectory)/.lock" }

    /// The directory holding a group's key file and salt.
    func groupDirectory(_ group: AccessGroup) -> String {
        if let name = group.name { return "\(root)/shared/\(Base64.urlEncode(name.utf8)).group" }
        return "\(root)/private/\(encodedService)"
    }

    /// The directory holding this service's items in `group`.
    func namespaceDirectory(_ group: AccessGroup) -> String {
        group.isShared ? "\(groupDirectory(group))/\(encodedService)" : groupDirectory(group)
    }

    func keyFilePath(_ group: AccessGroup) -> String { "\(groupDirectory(group))/key" }
    func saltPath(_ group: AccessGroup) -> String { "\(groupDirectory(group))/salt" }

    static func directoryMode(shared: Bool) -> mode_t { shared ? 0o2770 : 0o700 }
    static func fileMode(shared: Bool) -> mode_t { shared ? 0o640 : 0o600 }

    // MARK: Creation and permission checks

    /// Creates (0700, or 0770+setgid for a shared group) and checks the root and the
    /// `state`, `private` and `shared` containers; then this service's state directory.
    func prepareRoot(shared: Bool) throws {
        let mode = Self.directoryMode(shared: shared)
        try POSIX.makeDirectories(root, mode: mode)
        try checkDirectory(root, shared: true, followLinks: true)
        for container in ["state", shared ? "shared" : "private"] {
            let path = "\(root)/\(container)"
            try POSIX.makeDirectory(path, mode: shared ? 0o2770 : 0o700)
            try checkDirectory(path, shared: true)
        }
        try POSIX.makeDirectory(stateDirectory, mode: mode)
        try checkDirectory(stateDirectory, shared: true)
    }

    /// Creates (when `create`) and checks the group directory and this service's namespace in
    /// it. Returns `false` when `create` is off and the namespace does not exist.
    @discardableResult
    func prepareNamespace(_ group: AccessGroup, create: Bool) throws -> Bool {
        let shared = group.isShared
        let mode = Self.directoryMode(shared: shared)
        if create {
            if shared { try POSIX.makeDirectory("\(root)/shared", mode: 0o2770) }
            else { try POSIX.makeDirectory("\(root)/private", mode: 0o700) }
            try POSIX.makeDirectory(groupDirectory(group), mode: mode)
            if shared { try POSIX.makeDirectory(namespaceDirectory(group), mode: mode) }
        }
        guard try POSIX.status(namespaceDirectory(group)) != nil else { return false }
        try checkDirectory(groupDirectory(group), shared: shared)
        if shared { try checkDirectory(namespaceDirectory(group), shared: shared) }
        return true
    }

    /// A private directory must be 0700 and ours; a shared one at most 0770 (plus setgid /
    /// sticky). A symbolic link is refused except for the root itself.
    func checkDirectory(_ path: String, shared: Bool, followLinks: Bool = false) throws {
        guard let info = try POSIX.status(path, followLinks: followLinks) else {
            throw KeystoreError.io("stat", path: path, errno: ENOENT)
        }
        guard POSIX.isDirectory(info) else {
            throw KeystoreError(.insecurePermissions, "expected a directory (symbolic links are refused)", path: path, mode: UInt32(info.st_mode))
        }
        let forbidden: mode_t = shared ? 0o007 : 0o077
        guard info.st_mode & forbidden == 0 else {
            throw KeystoreError(
                .insecurePermissions,
                shared ? "directory is accessible to others; expected at most 0770" : "private directory is accessible to group or others; expected 0700",
                path: path, mode: UInt32(info.st_mode)
            )
        }
        if !shared && info.st_uid != geteuid() {
            throw KeystoreError(.insecurePermissions, "private directory is owned by another user", path: path, mode: UInt32(info.st_mode))
        }
    }

    /// A key or salt file: private at most 0600 and ours; shared at most 0640.
    func checkKeyFile(_ info: stat, path: String, shared: Bool) throws {
        guard POSIX.isRegular(info) else {
            throw KeystoreError(.insecurePermissions, "key file is not a regular file", path: path, mode: UInt32(info.st_mode))
        }
        let forbidden: mode_t = shared ? 0o7137 : 0o7177
        guard info.st_mode & forbidden == 0 else {
            throw KeystoreError(
                .insecurePermissions,
                shared ? "key file is looser than 0640" : "key file is looser than 0600",
                path: path, mode: UInt32(info.st_mode)
            )
        }
        if !shared && info.st_uid != geteuid() {
            throw KeystoreError(.insecurePermissions, "private key file is owned by another user", path: path, mode: UInt32(info.st_mode))
        }
    }

    // MARK: Last access group

    static func encode(_ group: AccessGroup) -> String {
        guard let name = group.name else { return "none" }
        return "group:" + Base64.urlEncode(name.utf8)
    }

    static func decodeGroup(_ text: Substring) -> AccessGroup? {
        if text == "none" { return AccessGroup.none }
        guard text.hasPrefix("group:"),
              let bytes = Base64.urlDecode(String(text.dropFirst(6))), !bytes.isEmpty,
              let name = String(validating: bytes, as: UTF8.self)
        else { return nil }
        return AccessGroup(name: name)
    }

    func readLastGroup() throws -> AccessGroup? {
        guard let bytes = try POSIX.readFile(lastGroupPath) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        guard let line = text.split(separator: "\n").first, let group = Self.decodeGroup(line) else {
            throw KeystoreError(.corruptFormat, "unreadable last access group record", path: lastGroupPath)
        }
        return group
    }

    func writeLastGroup(_ group: AccessGroup, shared: Bool) throws {
        let text = Self.encode(group) + "\n"
        try POSIX.atomicWrite(Array(text.utf8), to: lastGroupPath, directory: stateDirectory, mode: Self.fileMode(shared: shared))
    }
}
