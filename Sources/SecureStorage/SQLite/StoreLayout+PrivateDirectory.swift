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
    /// otherwise shut the user out for good. So the user's directory is the one entry named
    /// `<uid>` or `<uid>.<N>` that the user owns, whatever its number: only root can make an
    /// entry another user owns, and no member can move one of the user's directories there
    /// without write access to it (which a private directory never gives).
    /// - `<uid>` ours and private (the usual case): one `lstat`, nothing listed.
    /// - None of ours: `mkdir <uid>`, or, when someone else holds that name, `mkdir
    ///   <uid>.<random N>`, a name no member can take first because none can guess it. The
    ///   atomic `mkdir` decides; then `users/` is listed again, and if another process of this
    ///   user made one meanwhile, ours (still empty) is removed and theirs used, so that every
    ///   process ends up in one directory.
    /// - More than one of ours: a typed error naming them, not a guess; one may be a
    ///   directory of the user's that someone moved there, and picking it would hide the
    ///   sessions in the other.
    func choosePrivateDirectory(create: Bool) throws(KeystoreError) -> String? {
        let preferred = "\(usersDirectory)/\(userID)"
        if let info = try status(preferred), info.st_uid == userID, POSIX.isDirectory(info), info.st_mode & 0o077 == 0 {
            return preferred
        }
        for attempt in 0..<Self.privateDirectoryAttempts {
            let ours = try ownPrivateEntries()
            if ours.count == 1 { return ours[0] }
            if ours.count > 1 { throw severalPrivateDirectories(ours) }
            guard create else { return nil }
            let name: String
            if attempt == 0, try status(preferred) == nil {
                name = preferred
            } else {
                name = "\(preferred).\(UInt32.random(in: 1...999_999_999))"
            }
            guard try KeystoreError.rethrowing({ try POSIX.makeDirectory(name, mode: 0o700) }) else { continue }
            if try keepsPrivateDirectory(justMade: name) { return name }
        }
        throw KeystoreError(
            .io, "could not make a private directory in users/: every name tried was taken while it was made",
            path: usersDirectory, errno: EEXIST)
    }

    static let privateDirectoryAttempts = 16

    /// Whether the directory this process just made stays this user's: not when another
    /// process of the user made one at the same moment (whichever listed second sees both),
    /// in which case ours, still empty, is removed and the next attempt takes theirs.
    func keepsPrivateDirectory(justMade path: String) throws(KeystoreError) -> Bool {
        if try ownPrivateEntries().allSatisfy({ $0 == path }) { return true }
        _ = rmdir(path)
        return false
    }

    /// The directories `<uid>` and `<uid>.<N>` in `users/` that this user owns, whatever
    /// their mode (the namespace check says what is wrong with one). Files are left out: a
    /// member can hard-link a file of the user's there, never a directory.
    private func ownPrivateEntries() throws(KeystoreError) -> [String] {
        let prefix = "\(userID)"
        guard let names = try KeystoreError.rethrowing({ try POSIX.directoryEntries(usersDirectory, prefix: prefix) }) else {
            return []
        }
        var ours: [String] = []
        for name in names where name == prefix || Self.isNumberedName(name, prefix: prefix) {
            let path = "\(usersDirectory)/\(name)"
            if let info = try status(path), info.st_uid == userID, POSIX.isDirectory(info) { ours.append(path) }
        }
        return ours.sorted()
    }

    /// `<uid>.<N>`: N decimal, 1 to 9 digits, no leading zero.
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
            "users/ holds more than one entry of yours for your private sessions (\(paths.map(POSIX.lastComponent(of:)).joined(separator: ", "))); "
                + "another member may have moved one of your directories there: keep the one that holds your sessions and remove the others",
            path: usersDirectory)
    }
}
