#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the SQLite engine keeps its files under a root, and the permission rules for each.
///
/// ```
/// <root>/                              0700 when created here; an administrator's shared root is
///                                      3770 and group-owned: world-writable, or group-writable
///                                      without +t, is insecurePermissions
/// <root>/users/                        1770 (+ setgid inherited) under a group-shared root, else 0700;
///                                      never world-writable, sticky whenever group-writable
/// <root>/users/<uid>/                  0700, owned by that uid: the user's private namespaces
///                                      (`<uid>.N` when another member took `<uid>` first:
///                                      `choosePrivateDirectory(create:)`)
/// <root>/users/<uid>/key, salt         the private key file (0600) and passphrase salt
/// <root>/users/<uid>/<svc>.sqlite      a service's private database, 0600 (-wal, -shm alike)
/// <root>/groups/                       3770 under a group-shared root, else 0700; checked like users/
/// <root>/groups/<group>.group/         a shared access group: 2770, group inherited from the root
/// <root>/groups/<group>.group/key, salt        0640
/// <root>/groups/<group>.group/<svc>.sqlite     0660 (-wal, -shm alike)
/// ```
/// Every directory and link on the way to `<root>`, as given and as resolved, the root included,
/// belongs to root or this user, and is sticky where others can write it (`checkWayToRoot`).
/// `<svc>` and `<group>` are unpadded base64url of the name's UTF-8, so no name can traverse
/// paths or collide with `key` and `salt` (base64url has no `.`). Every directory and file is
/// `chmod`ed after creation, so each member's umask (077 included) does not matter. The
/// service's last access group lives in the meta table of its private database, where only
/// the user can write.
struct StoreLayout: Sendable {
    let root: String
    /// The root as given (made absolute), links and all: the way to it is checked too.
    let givenRoot: String
    /// Whether ``checkWayToRoot()`` runs (``SQLiteKeystore/Configuration/checksWayToRoot``).
    let checksWayToRoot: Bool
    let service: String
    let userID: uid_t
    /// This user's directory in `users/`, once `prepareDirectories(.none, …)` found or made it.
    let privateChoice = PrivateDirectoryChoice()

    static let maximumKeyBytes = ItemKey.maximumBytes

    init(root: String, service: String, checksWayToRoot: Bool = true) throws(KeystoreError) {
        try NameRules.validate(service: service)
        guard !root.isEmpty else { throw KeystoreError(.invalidName, "the keystore root is empty") }
        var trimmed = root
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        // Links on the way to the root are followed once, here, when they are this user's or
        // root's (`checkWayToRoot`): a `~/.local/share` linked elsewhere, say. Below the root
        // every link stays refused.
        self.root = POSIX.resolvingLinks(trimmed)
        if trimmed.hasPrefix("/") {
            self.givenRoot = trimmed
        } else {
            self.givenRoot = POSIX.currentDirectory().map { $0 + "/" + trimmed } ?? self.root
        }
        self.service = service
        self.userID = geteuid()
        self.checksWayToRoot = checksWayToRoot
    }


    // MARK: Paths

    var usersDirectory: String { "\(root)/users" }
    var groupsDirectory: String { "\(root)/groups" }
    /// `users/<uid>`, or the `users/<uid>.N` that stands in for it, as
    /// `prepareDirectories(.none, …)` found it; `users/<uid>` before that.
    var userDirectory: String { privateChoice.path ?? "\(usersDirectory)/\(userID)" }

    /// The directory of `group`'s key, salt and databases.
    func namespaceDirectory(_ group: AccessGroup) -> String {
        guard let name = group.name else { return userDirectory }
        return "\(groupsDirectory)/\(Base64.urlEncode(name.utf8)).group"
    }

    func databasePath(_ group: AccessGroup) -> String {
        "\(namespaceDirectory(group))/\(Base64.urlEncode(service.utf8)).sqlite"
    }

    func keyFilePath(_ group: AccessGroup) -> String { "\(namespaceDirectory(group))/key" }
    func saltPath(_ group: AccessGroup) -> String { "\(namespaceDirectory(group))/salt" }

    static func databaseMode(shared: Bool) -> mode_t { shared ? 0o660 : 0o600 }
    static func keyFileMode(shared: Bool) -> mode_t { shared ? 0o640 : 0o600 }

    // MARK: Directories

    /// Creates (when `create`) and checks the root, the container and the namespace directory
    /// of `group`. Returns `false` when `create` is off and something is missing, in which case
    /// no item of the namespace can exist.
    func prepareDirectories(_ group: AccessGroup, create: Bool) throws(KeystoreError) -> Bool {
        if try status(root, followLinks: true) == nil {
            guard create else { return false }
            try KeystoreError.rethrowing { try POSIX.makeDirectories(root, mode: 0o700) }
        }
        guard let rootInfo = try status(root, followLinks: true) else { return false }
        try checkSharedDirectory(rootInfo, path: root)
        if checksWayToRoot {
            try checkWayToRoot()
        } else if rootInfo.st_uid != 0 && rootInfo.st_uid != userID {
            // The walk is off for a volume no other user shares, but the root's owner is
            // known already, and one who is neither root nor this user could rename its
            // contents whatever the walk says.
            throw KeystoreError(
                .insecurePermissions,
                "\(root) belongs to another user (uid \(rootInfo.st_uid)), who could move or replace what is in it; "
                    + "use a directory of your own inside it (or chown it to you)",
                path: root, mode: UInt32(rootInfo.st_mode))
        }
        let sharedRoot = rootInfo.st_mode & 0o070 != 0
        let inheritedSetgid = rootInfo.st_mode & S_ISGID

        let container = group.isShared ? groupsDirectory : usersDirectory
        let containerMode: mode_t = sharedRoot ? (group.isShared ? 0o3770 : 0o1770 | inheritedSetgid) : 0o700
        let mayNotMakeUsers = !group.isShared && sharedRoot && create && userID != 0 && userID != rootInfo.st_uid
        if mayNotMakeUsers, try status(container) == nil {
            // Whoever owns `users/` may rename any entry in it, sticky or not: a member who
            // made it could swap a user's private directory for an older copy of it.
            throw KeystoreError(
                .insecurePermissions,
                "the shared keystore root has no users/ directory, and only the root's owner (uid \(rootInfo.st_uid)) or root may make it, "
                    + "so that no member can rename another's private directory; as that user, run: "
                    + "install -d -m \(String(0o1770 | inheritedSetgid, radix: 8)) -g \(rootInfo.st_gid) \(container)",
                path: container)
        }
        guard try makeDirectory(container, mode: containerMode, create: create) else { return false }
        guard let containerInfo = try status(container) else { return false }
        try checkSharedDirectory(containerInfo, path: container)
        if !group.isShared && (sharedRoot || containerInfo.st_mode & 0o022 != 0) {
            try checkUsersDirectoryOwner(containerInfo, rootOwner: rootInfo.st_uid)
        }

        let directory: String
        if group.isShared {
            directory = namespaceDirectory(group)
            guard try makeDirectory(directory, mode: 0o2770, create: create) else { return false }
        } else {
            guard let chosen = try choosePrivateDirectory(create: create) else { return false }
            directory = chosen
        }
        guard let info = try status(directory) else {
            guard create && !group.isShared else { return false }
            throw KeystoreError(.io, "the private directory went away while it was opened; try again", path: directory, errno: ENOENT)
        }
        try checkNamespaceDirectory(info, path: directory, shared: group.isShared)
        if !group.isShared { privateChoice.choose(directory) }
        return true
    }

    private func makeDirectory(_ path: String, mode: mode_t, create: Bool) throws(KeystoreError) -> Bool {
        if try status(path) != nil { return true }
        guard create else { return false }
        _ = try KeystoreError.rethrowing { try POSIX.makeDirectory(path, mode: mode) }
        return true
    }

    func status(_ path: String, followLinks: Bool = false) throws(KeystoreError) -> stat? {
        try KeystoreError.rethrowing { try POSIX.status(path, followLinks: followLinks) }
    }

    /// The root, `users/` and `groups/`: directories (no symbolic link below the root) that, when
    /// writable by others, are sticky so no one can rename or remove another user's entries.
    private func checkSharedDirectory(_ info: stat, path: String) throws(KeystoreError) {
        guard POSIX.isDirectory(info) else {
            throw KeystoreError(.insecurePermissions, "expected a directory (symbolic links are refused)", path: path, mode: UInt32(info.st_mode))
        }
        if info.st_mode & 0o002 != 0 {
            // Sharing is by Unix group; a directory anyone can write is most likely one someone
            // else made in a shared place (`/tmp/ks`), ready to be used by whoever comes next.
            throw KeystoreError(
                .insecurePermissions,
                "directory is writable by everyone; a shared keystore root is writable by its group only (install -d -m 3770 -g GROUP)",
                path: path, mode: UInt32(info.st_mode))
        }
        if info.st_mode & 0o022 != 0 && info.st_mode & S_ISVTX == 0 {
            throw KeystoreError(
                .insecurePermissions,
                "directory is writable by group or others but not sticky; run chmod +t on it",
                path: path, mode: UInt32(info.st_mode)
            )
        }
    }

    /// `users/` in a shared root (or writable by others): owned by root, the keystore root's
    /// owner (who can rename `users/` itself anyway) or this user. Any other owner could rename
    /// this user's private directory, whatever the mode (a directory's owner can always
    /// `chmod` it back), and later put an older copy of it back, which every check would pass.
    private func checkUsersDirectoryOwner(_ info: stat, rootOwner: uid_t) throws(KeystoreError) {
        guard info.st_uid != 0, info.st_uid != rootOwner, info.st_uid != userID else { return }
        throw KeystoreError(
            .insecurePermissions,
            "users/ belongs to another member (uid \(info.st_uid)), who could rename your private directory; "
                + "the keystore root's owner (uid \(rootOwner)) should take it over: chown \(rootOwner) \(usersDirectory)",
            path: usersDirectory, mode: UInt32(info.st_mode))
    }

    /// `users/<uid>`: 0700 and ours; a group's directory: no access for others.
    private func checkNamespaceDirectory(_ info: stat, path: String, shared: Bool) throws(KeystoreError) {
        guard POSIX.isDirectory(info) else {
            throw KeystoreError(.insecurePermissions, "expected a directory (symbolic links are refused)", path: path, mode: UInt32(info.st_mode))
        }
        if shared {
            guard info.st_mode & 0o007 == 0 else {
                throw KeystoreError(.insecurePermissions, "group directory is accessible to others; expected 2770", path: path, mode: UInt32(info.st_mode))
            }
        } else {
            // Owner first: a mode the user cannot change is no advice to give.
            guard info.st_uid == userID else {
                throw KeystoreError(
                    .insecurePermissions, "private directory is owned by another user (uid \(info.st_uid))",
                    path: path, mode: UInt32(info.st_mode))
            }
            guard info.st_mode & 0o077 == 0 else {
                throw KeystoreError(.insecurePermissions, "private directory is accessible to group or others; expected 0700", path: path, mode: UInt32(info.st_mode))
            }
        }
    }

    /// A database, its SQLite siblings or a key file: a regular file, at most `mode`, and ours
    /// when private.
    func checkFile(_ info: stat, path: String, shared: Bool, mode: mode_t, what: String) throws(KeystoreError) {
        guard POSIX.isRegular(info) else {
            throw KeystoreError(.insecurePermissions, "\(what) is not a regular file (symbolic link, FIFO, directory or socket refused)", path: path, mode: UInt32(info.st_mode))
        }
        guard info.st_mode & 0o7777 & ~mode == 0 else {
            throw KeystoreError(.insecurePermissions, "\(what) is looser than 0\(String(mode, radix: 8))", path: path, mode: UInt32(info.st_mode))
        }
        if !shared && info.st_uid != userID {
            throw KeystoreError(.insecurePermissions, "private \(what) is owned by another user", path: path, mode: UInt32(info.st_mode))
        }
    }
}
