#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension StoreLayout: KeyFileLocation {
    func checkKeyFile(_ info: stat, path: String, shared: Bool) throws {
        try checkFile(info, path: path, shared: shared, mode: Self.keyFileMode(shared: shared), what: "key file")
    }

    /// Writes the key into an unnamed `O_TMPFILE` in the namespace directory and links it into
    /// place, so concurrent creators agree on one file, a reader never sees a partial key, and a
    /// crash leaves nothing behind (no temporary names, no lock file). File systems without
    /// `O_TMPFILE` fall back to a named temporary file and `link(2)`.
    func createKeyFile(_ bytes: [UInt8], at path: String, group: AccessGroup) throws -> Bool {
        let directory = namespaceDirectory(group)
        let mode = Self.keyFileMode(shared: group.isShared)
        // O_TMPFILE is `__O_TMPFILE | O_DIRECTORY`, a macro Swift does not import; the
        // __O_TMPFILE bit is the same on every Linux architecture Swift supports.
        let fd = open(directory, O_WRONLY | O_CLOEXEC | O_DIRECTORY | 0o20000000, mode)
        guard fd >= 0 else {
            return try POSIX.createExclusively(bytes, at: path, directory: directory, mode: mode)
        }
        defer { close(fd) }
        guard fchmod(fd, mode) == 0 else { throw KeystoreError.io("fchmod", path: path) }
        try POSIX.writeAll(fd, bytes, path: path)
        try POSIX.syncFile(fd, path: path)
        if linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, path, AT_SYMLINK_FOLLOW) != 0 {
            if errno == EEXIST { return false }
            if errno == ENOENT { return try POSIX.createExclusively(bytes, at: path, directory: directory, mode: mode) }
            throw KeystoreError.io("linkat", path: path)
        }
        try POSIX.fsyncDirectory(directory)
        return true
    }
}
