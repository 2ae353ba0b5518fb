#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Whether a path is on a file system mounted read-only: SQLite creates a WAL database's
/// `-wal` and `-shm` files beside it even to read it, so a keystore on such a mount (a volume
/// a container mounts read-only) fails every read with a bare "unable to open database file"
/// and a misleading `errno`. Naming the mount is what lets the user fix it.
enum ReadOnlyFileSystem {
    /// `true` when `path`, or the nearest directory above it that exists, is on a read-only
    /// mount; `false` otherwise, and when `statvfs` fails (the check only improves a message).
    static func holds(_ path: String) -> Bool {
        var candidate = path
        while true {
            var info = statvfs()
            if statvfs(candidate, &info) == 0 { return info.f_flag & UInt(ST_RDONLY) != 0 }
            guard errno == ENOENT || errno == ENOTDIR, candidate != "/", candidate != "." else { return false }
            guard let slash = candidate.lastIndex(of: "/") else {
                candidate = "."  // a relative path's first component: the working directory holds it
                continue
            }
            candidate = slash == candidate.startIndex ? "/" : String(candidate[..<slash])
        }
    }
}
