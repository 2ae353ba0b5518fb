#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Which directory in `users/` is this user's, once ``StoreLayout/prepareDirectories(_:create:)``
/// has found or made it; shared by every copy of one layout, so that every path derived from
/// it names the same directory.
final class PrivateDirectoryChoice: Sendable {
    private let chosen = Mutex<String?>(nil)

    var path: String? { chosen.withLock { $0 } }

    func choose(_ path: String) { chosen.withLock { $0 = path } }
}

extension StoreLayout {
    /// Finds this user's private directory in `users/`, or makes it when `create` is on;
    /// `nil` when there is none and `create` is off. Runs after `users/` itself was checked.
    ///
    /// Under a shared root every member can make entries in `users/` (sticky, so none can
    /// remove another's). A member who made `users/<uid>` before the user's first run would
    /// otherwise shut the user out for good. So the user's directory is the one directory
    /// named `<uid>` or `<uid>.<N>` that the user owns and has committed (below): only root can
    /// make an entry another user owns, and no member can move one of the user's directories
    /// there without write access to it, which neither a private nor a pending one gives (one
    /// the user made writable to the group, such as a group directory, a member may move
    /// there: such a directory counts only when there is no other, and one shaped like a group
    /// directory never does).
    /// - `<uid>` ours and 0700 (the usual case): one `lstat`, nothing listed.
    /// - None of ours: made *pending*, mode 000, as `<uid>`, or, when someone else holds that
    ///   name, as `<uid>.<random N>`, a name no member can take first because none can guess
    ///   it. Then `users/` is listed again: alone, it is *committed* (`chmod 0700`, the one
    ///   step that makes it usable); with another of the user's beside it (another process of
    ///   the user choosing at the same moment), it is removed and the next attempt, after a
    ///   short random pause, takes theirs. Only a pending directory is ever removed (by its
    ///   maker, or by a later open once stale, while still empty), so no process loses a
    ///   directory another already chose, and a crash before the commit leaves only a pending
    ///   one, which is never chosen.
    /// - Pending ones of the user's but none committed: another process of the user is
    ///   choosing; this one waits for it (up to ``stalePendingAge`` and a margin).
    /// - More than one committed: a typed error naming them, not a guess that would hide the
    ///   sessions in the other (one may be a directory of the user's that someone moved in).
    func choosePrivateDirectory(create: Bool) throws(KeystoreError) -> String? {
        let preferred = "\(usersDirectory)/\(userID)"
        if let info = try status(preferred), info.st_uid == userID, POSIX.isDirectory(info), info.st_mode & 0o777 == 0o700 {
            return preferred
        }
        // Past the age at which another process's pending directory counts as stale (with a
        // margin for whole-second mtimes): by then it is committed, however slow its disk, or
        // a later listing removes it.
        let deadline = ContinuousClock.now + .seconds(Self.stalePendingAge + 2)
        var pause: Int64 = 0  // µs
        while true {
            if pause > 0 { usleep(UInt32(clamping: Int64.random(in: pause / 2...pause))) }
            let listed = ContinuousClock.now
            let ours = try ownPrivateEntries(create: create)
            // A directory of the user's that others may write cannot be a private one, and a
            // member could have moved it here (the user's group directory, from a `groups/`
            // the member owns): it neither hides the user's own nor makes it one of several.
            // One shaped like a group directory (setgid, which no private directory is) is
            // passed over even alone, so that such a move cannot shut the user out before the
            // first private open; any other one, alone, is taken, and the namespace check says
            // what is wrong with it (the user's own, made group-writable by hand).
            let committed = ours.filter { !$0.pending && !$0.isGroupDirectory }
            let closed = committed.filter { !$0.writableByOthers }.map(\.path)
            let candidates = closed.isEmpty ? committed.map(\.path) : closed
            if candidates.count == 1 { return candidates[0] }
            if candidates.count > 1 { throw severalPrivateDirectories(candidates) }
            guard create else { return nil }
            guard ContinuousClock.now < deadline else {
                throw KeystoreError(
                    .io, "could not settle on a private directory in users/: other processes of yours kept choosing at the same time; try again",
                    path: usersDirectory, errno: ETIMEDOUT)
            }
            // Random pauses of at least two listings, so that two processes of the user that
            // saw each other's directory and both stepped back do not stay in step (a member
            // can make the listing slow by filling users/).
            pause = max(min(max(pause * 2, 200), 20_000), (ContinuousClock.now - listed).wholeMicroseconds * 2)
            // Another process of the user is choosing: let it finish.
            if ours.contains(where: \.pending) { continue }
            let name = try status(preferred) == nil ? preferred : "\(preferred).\(UInt32.random(in: 1...999_999_999))"
            guard let made = try makePendingDirectory(name) else { continue }
            if try commitsPrivateDirectory(made) { return name }
        }
    }

    /// A pending directory's mtime older than this is what a crash between making and
    /// committing it left behind: a process commits its own within half of it, or not at all.
    static let stalePendingAge: Int64 = 10

    /// A directory this process made pending, and which it alone may commit or remove.
    struct PendingDirectory {
        let path: String
        let device: dev_t
        let inode: ino_t
        let madeAt: ContinuousClock.Instant
    }

    /// Makes `path` with mode 000 exactly (umask only removes bits; the commit's chmod clears
    /// an inherited setgid), unsynced: only the commit needs to last. `nil` when it exists.
    func makePendingDirectory(_ path: String) throws(KeystoreError) -> PendingDirectory? {
        let madeAt = ContinuousClock.now
        guard mkdir(path, 0) == 0 else {
            if errno == EEXIST { return nil }
            throw KeystoreError.io("mkdir", path: path)
        }
        guard let info = try status(path) else { return nil }
        return PendingDirectory(path: path, device: info.st_dev, inode: info.st_ino, madeAt: madeAt)
    }

    /// Commits a pending directory this process made when it is the only one of the user's in
    /// `users/`, and made recently enough that no other open can take it for a crash's
    /// leftover; otherwise removes it (still empty: no one but root can make an entry in a
    /// directory of mode 000) and returns `false`. The commit is synced, the directory's own
    /// inode and `users/`: a committed directory is one later opens find.
    func commitsPrivateDirectory(_ made: PendingDirectory) throws(KeystoreError) -> Bool {
        let alone = try ownPrivateEntries(create: false, removingStale: false).allSatisfy { $0.path == made.path || $0.isGroupDirectory }
        guard alone, ContinuousClock.now - made.madeAt < .seconds(Self.stalePendingAge / 2) else {
            if try isStill(made) { _ = rmdir(made.path) }
            return false
        }
        // The same directory, not one another process made under the name after removing ours.
        guard try isStill(made) else { return false }
        guard chmod(made.path, 0o700) == 0 else {
            if errno == ENOENT { return false }
            throw KeystoreError.io("chmod", path: made.path)
        }
        try KeystoreError.rethrowing {
            try POSIX.fsyncDirectory(made.path)
            try POSIX.fsyncDirectory(usersDirectory)
        }
        return true
    }

    private func isStill(_ made: PendingDirectory) throws(KeystoreError) -> Bool {
        guard let info = try status(made.path) else { return false }
        return info.st_dev == made.device && info.st_ino == made.inode
    }

    private struct OwnEntry {
        let path: String
        /// Mode 000: made, not yet committed.
        let pending: Bool
        /// Group- or world-writable.
        let writableByOthers: Bool
        /// Setgid and writable by others, as the store makes a shared group's directory
        /// (`groups/<group>.group`, 2770) and never a private one.
        let isGroupDirectory: Bool
    }

    /// The directories `<uid>` and `<uid>.<N>` in `users/` that this user owns, committed
    /// (whatever their mode: the namespace check says what is wrong with one) or pending.
    /// Files are left out: a member can hard-link a file of the user's there, never a
    /// directory.
    ///
    /// A directory of mode 000 is pending only while it is as `mkdir` made it: its status
    /// changed (`ctime`) within a second of its last modification (`mtime`: a security label
    /// or default ACL written as it is made can move ctime by a clock tick), and that is
    /// recent. One older, or changed since (the user's own directory `chmod 000`ed by hand), is
    /// removed when empty (a crash's leftover) and is an error when it holds entries, for
    /// reads as for writes: passing it over would read as "no sessions", and `clear` would
    /// report a session gone that is still there. It is looked at again just before: one its
    /// maker committed meanwhile is taken as committed. A read that cannot remove an old
    /// leftover (a read-only mount) passes it over; one changed since it was made is an error
    /// all the same. When `removingStale` is off, nothing is removed or checked (the commit's
    /// own look).
    private func ownPrivateEntries(create: Bool, removingStale: Bool = true) throws(KeystoreError) -> [OwnEntry] {
        let prefix = "\(userID)"
        guard let names = try KeystoreError.rethrowing({ try POSIX.directoryEntries(usersDirectory, prefix: prefix) }) else {
            return []
        }
        var ours: [OwnEntry] = []
        func add(_ path: String, _ info: stat) {
            let writableByOthers = info.st_mode & 0o022 != 0
            ours.append(OwnEntry(
                path: path, pending: info.st_mode & 0o777 == 0, writableByOthers: writableByOthers,
                isGroupDirectory: writableByOthers && info.st_mode & S_ISGID != 0))
        }
        for name in names where name == prefix || Self.isNumberedName(name, prefix: prefix) {
            let path = "\(usersDirectory)/\(name)"
            guard let info = try status(path), info.st_uid == userID, POSIX.isDirectory(info) else { continue }
            let pending = info.st_mode & 0o777 == 0
            let changedSinceMade = Self.changedSinceMade(info)
            let stale = Int64(time(nil)) - Int64(Self.modified(info).tv_sec) > Self.stalePendingAge
            guard pending && removingStale && (changedSinceMade || stale) else {
                add(path, info)
                continue
            }
            // Committed (or replaced) since it was listed: taken as it is now.
            guard let again = try status(path), again.st_dev == info.st_dev, again.st_ino == info.st_ino, again.st_mode & 0o777 == 0 else {
                if let now = try status(path), now.st_uid == userID, POSIX.isDirectory(now) { add(path, now) }
                continue
            }
            if rmdir(path) == 0 || errno == ENOENT { continue }
            let failure = errno
            if failure == ENOTEMPTY || failure == EEXIST {
                // Its maker committed it and wrote into it between the look and the rmdir.
                if let now = try status(path), now.st_dev == info.st_dev, now.st_ino == info.st_ino, now.st_mode & 0o777 != 0 {
                    add(path, now)
                    continue
                }
                // Not a leftover of the protocol: the user's own directory, chmod 000 by hand.
                throw KeystoreError(
                    .insecurePermissions,
                    "a directory of yours in users/ has mode 000 but holds entries: chmod 700 it if it holds your sessions, else remove it",
                    path: path, mode: UInt32(info.st_mode))
            }
            if changedSinceMade {
                throw KeystoreError(
                    .insecurePermissions,
                    "a directory of yours in users/ has mode 000 and was changed since it was made, and cannot be removed (\(String(cString: strerror(failure)))): "
                        + "chmod 700 it if it holds your sessions, else remove it",
                    path: path, mode: UInt32(info.st_mode))
            }
            // An old leftover a read cannot remove (a read-only mount): nothing of it is read.
            if !create { continue }
            throw KeystoreError.io("rmdir", path: path, errno: failure)
        }
        return ours.sorted { $0.path < $1.path }
    }

    /// Whether `info`'s status changed more than a second after its last modification: not a
    /// directory as `mkdir` made it.
    private static func changedSinceMade(_ info: stat) -> Bool {
        let (modified, changed) = (modified(info), Self.changed(info))
        let nanoseconds = (Int64(changed.tv_sec) - Int64(modified.tv_sec)) * 1_000_000_000 + Int64(changed.tv_nsec) - Int64(modified.tv_nsec)
        return nanoseconds > 1_000_000_000
    }

    private static func modified(_ info: stat) -> timespec {
        #if canImport(Darwin)
        info.st_mtimespec
        #else
        info.st_mtim
        #endif
    }

    private static func changed(_ info: stat) -> timespec {
        #if canImport(Darwin)
        info.st_ctimespec
        #else
        info.st_ctim
        #endif
    }

    /// `<uid>.<N>` (the caller has matched the `<uid>` prefix): N decimal, 1 to 9 digits, no
    /// leading zero.
    private static func isNumberedName(_ name: String, prefix: String) -> Bool {
        let digits = name.utf8.dropFirst(prefix.utf8.count + 1)
        guard name.utf8.count > prefix.utf8.count + 1,
              name.utf8[name.utf8.index(name.utf8.startIndex, offsetBy: prefix.utf8.count)] == UInt8(ascii: "."),
              let first = digits.first, first != UInt8(ascii: "0"), digits.count <= 9
        else { return false }
        return digits.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }

    private func severalPrivateDirectories(_ paths: [String]) -> KeystoreError {
        KeystoreError(
            .insecurePermissions,
            "users/ holds more than one directory of yours for private sessions (\(paths.map(POSIX.lastComponent(of:)).joined(separator: ", "))); "
                + "keep the one that holds your sessions and remove the others (one may be a directory of yours that someone moved there)",
            path: usersDirectory)
    }
}
