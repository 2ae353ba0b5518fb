#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension StoreLayout {
    /// The name of this user's private directory in `users/`: `<uid>`, unless another member
    /// took that name first.
    ///
    /// Under a shared root every member can make entries in `users/` (sticky, so none can
    /// remove another's). A member who made `users/<uid>` before that user's first run would
    /// otherwise shut the user out of private sessions for good, since only the squatter, the
    /// root's owner or root can remove it. So the user's directory is the first of `<uid>`,
    /// `<uid>.1`, `<uid>.2`, … that is not another user's, and thereafter the user's own one
    /// with the lowest number. Ownership decides, not the name: no one but root can make a
    /// directory another user owns.
    ///
    /// - `<uid>` ours (the usual case): one `lstat`, nothing listed.
    /// - `<uid>` missing: a `<uid>.N` of ours if there is one (made while `<uid>` was taken by
    ///   someone who has since removed it), else `<uid>`.
    /// - `<uid>` someone else's: our `<uid>.N` with the lowest N, else the first free N.
    ///
    /// Nothing is made or trusted here: ``prepareDirectories(_:create:)`` makes the directory
    /// and checks that it is ours and 0700, as it does for `<uid>`.
    static func privateDirectoryName(in usersDirectory: String, userID: uid_t) -> String {
        let preferred = "\(userID)"
        let status: stat?
        do {
            status = try POSIX.status(usersDirectory + "/" + preferred)
        } catch {
            return preferred  // not reachable: the checks that follow say why
        }
        if let status, status.st_uid == userID { return preferred }
        let entries = (try? POSIX.directoryEntries(usersDirectory)) ?? nil
        guard let entries else { return preferred }
        var taken = Set<Int>()
        var lowestOurs: Int?
        for name in entries {
            guard let number = fallbackNumber(name, userID: userID) else { continue }
            taken.insert(number)
            guard let info = try? POSIX.status(usersDirectory + "/" + name),
                  info.st_uid == userID, POSIX.isDirectory(info)
            else { continue }
            lowestOurs = min(lowestOurs ?? number, number)
        }
        if let lowestOurs { return "\(preferred).\(lowestOurs)" }
        if status == nil { return preferred }
        var free = 1
        while taken.contains(free) { free += 1 }
        return "\(preferred).\(free)"
    }

    /// N of a `<uid>.N` name (N ≥ 1, decimal, no leading zero), or `nil`.
    private static func fallbackNumber(_ name: String, userID: uid_t) -> Int? {
        let prefix = "\(userID)."
        guard name.hasPrefix(prefix) else { return nil }
        let digits = name.utf8.dropFirst(prefix.utf8.count)
        guard let first = digits.first, first != UInt8(ascii: "0"), digits.count <= 9,
              digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else { return nil }
        return Int(String(decoding: digits, as: UTF8.self))
    }
}
