#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension StoreLayout {
    /// The way to the root, as given, each link followed through its own way (which covers
    /// the resolved path too): every directory and link on it, the root included, belongs to
    /// root or this user, and a directory on it that others can write is sticky. Otherwise another user could rename what is on the way, and move,
    /// withhold or roll back every private directory under it: a `/tmp/ks` or a `/tmp/x/`
    /// another member made before this user's first run, a link a member put in a team
    /// directory, a root a member owns. Checked after the root is made, so a directory a
    /// member made meanwhile is seen.
    func checkWayToRoot() throws(KeystoreError) {
        var walk = WayToRoot(userID: userID)
        try walk.check(givenRoot)
    }
}

/// One walk from `/` down a path, following each link through its own way.
struct WayToRoot {
    /// Links followed before the walk gives up, as the kernel's `ELOOP` does.
    static let maximumLinks = 40

    let userID: uid_t
    /// The user's own group under the user-private-group convention (named after the user,
    /// no other member), which Debian and Fedora give every user with umask 002: a directory
    /// only it can write (`~/.local`, made by pip) is writable by no one else. Looked up only
    /// when a group-writable directory is on the way: the user and group databases can be a
    /// network service, slow or down.
    private var privateGroup: gid_t??
    private var linksFollowed = 0

    init(userID: uid_t) {
        self.userID = userID
    }

    mutating func check(_ path: String) throws(KeystoreError) {
        var directory = "/"
        var containing = try status("/", followLinks: true)
        for component in path.utf8.split(separator: UInt8(ascii: "/")) {
            let entry = (directory == "/" ? "" : directory) + "/" + String(decoding: component, as: UTF8.self)
            let own = try status(entry, followLinks: false)
            guard trusted(own.st_uid) else {
                throw refuse("\(entry) belongs to another user (uid \(own.st_uid)), who could move or replace it", entry, own)
            }
            if othersCanWrite(containing) && containing.st_mode & S_ISVTX == 0 {
                throw refuse("\(directory) \(KeystoreError.unstickyWayToRootReason), so they could rename \(entry)", directory, containing)
            }
            if POSIX.isLink(own) {
                // Where it points has a way of its own, links in it included.
                linksFollowed += 1
                guard linksFollowed <= Self.maximumLinks else { throw refuse("more than \(Self.maximumLinks) links", entry, own) }
                let target = try KeystoreError.rethrowing { try POSIX.linkTarget(entry) }
                try check(target.hasPrefix("/") ? target : directory + "/" + target)
            }
            let followed = try status(entry, followLinks: true)
            guard POSIX.isDirectory(followed) else { throw refuse("\(entry) is not a directory", entry, followed) }
            guard trusted(followed.st_uid) else {
                throw refuse("\(entry) leads to a directory of another user (uid \(followed.st_uid))", entry, followed)
            }
            directory = entry
            containing = followed
        }
    }

    private func trusted(_ owner: uid_t) -> Bool { owner == 0 || owner == userID }

    private mutating func othersCanWrite(_ info: stat) -> Bool {
        if info.st_mode & 0o002 != 0 { return true }
        guard info.st_mode & 0o020 != 0 else { return false }
        if privateGroup == nil { privateGroup = .some(Self.privateGroup(of: userID)) }
        let group: gid_t? = privateGroup ?? nil
        return info.st_gid != group
    }

    /// The entry's status; one missing was there a moment ago (the root exists), so someone
    /// moved it while this walk ran.
    private func status(_ path: String, followLinks: Bool) throws(KeystoreError) -> stat {
        guard let info = try KeystoreError.rethrowing({ try POSIX.status(path, followLinks: followLinks) }) else {
            throw KeystoreError(
                .insecurePermissions,
                "the way to the keystore root changed while it was checked: \(path) is gone; try again, and check who else can rename it",
                path: path)
        }
        return info
    }

    private func refuse(_ reason: String, _ path: String, _ info: stat) -> KeystoreError {
        var advice = "use a root that only you or root control (a shared one made by an administrator: install -d -m 3770 -g GROUP ROOT; "
            + "in a container no other user shares, see SQLiteKeystore.Configuration.checksWayToRoot)"
        if info.st_mode & 0o022 == 0o020 && info.st_uid == userID {
            advice = "run chmod g-w on it, or use a root that only you or root control"
        }
        return KeystoreError(
            .insecurePermissions, "\(KeystoreError.unsafeWayToRootReason): \(reason); \(advice)",
            path: path, mode: UInt32(info.st_mode))
    }

    /// `userID`'s primary group when it is a private one: named after the user, with no other
    /// listed member; `nil` otherwise, or when the databases cannot say.
    static func privateGroup(of userID: uid_t) -> gid_t? {
        // The entries point into the buffers: everything is read inside their closures.
        var accountBuffer = [CChar](repeating: 0, count: 4096)
        let user: (name: String, gid: gid_t)? = accountBuffer.withUnsafeMutableBufferPointer { buffer in
            var account = passwd()
            var found: UnsafeMutablePointer<passwd>?
            guard let base = buffer.baseAddress, getpwuid_r(userID, &account, base, buffer.count, &found) == 0, found != nil,
                let name = account.pw_name
            else { return nil }
            return (String(cString: name), account.pw_gid)
        }
        guard let user else { return nil }
        var groupBuffer = [CChar](repeating: 0, count: 16384)
        let isPrivate: Bool = groupBuffer.withUnsafeMutableBufferPointer { buffer in
            var entry = group()
            var found: UnsafeMutablePointer<group>?
            guard let base = buffer.baseAddress, getgrgid_r(user.gid, &entry, base, buffer.count, &found) == 0, found != nil,
                let groupName = entry.gr_name, String(cString: groupName) == user.name
            else { return false }
            var member = entry.gr_mem
            while let name = member?.pointee {
                if String(cString: name) != user.name { return false }
                member = member?.advanced(by: 1)
            }
            return true
        }
        return isPrivate ? user.gid : nil
    }
}

extension KeystoreError {
    /// How the reason of a refusal by the way-to-root check begins.
    package static let unsafeWayToRootReason = "the way to the keystore root is not safe"
    /// What the reason says of a directory above the root that others can write and that is
    /// not sticky: the one refusal a container volume no other user shares meets (for a front
    /// end that offers its own way to turn the check off).
    package static let unstickyWayToRootReason = "is writable by others and not sticky"
}
