#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Thin, `EINTR`-safe wrappers over the system calls the SQLite engine makes outside SQLite
/// (directories, key and salt files). Every failure becomes a ``KeystoreError`` naming the
/// path and `errno`.
enum POSIX {
    static let maximumFileSize = 16 << 20

    /// `lstat`, or `nil` when the path does not exist.
    static func status(_ path: String, followLinks: Bool = false) throws -> stat? {
        var info = stat()
        let result = followLinks ? stat(path, &info) : lstat(path, &info)
        if result == 0 { return info }
        if errno == ENOENT { return nil }
        throw KeystoreError.io("stat", path: path)
    }

    static func isDirectory(_ info: stat) -> Bool { info.st_mode & S_IFMT == S_IFDIR }
    static func isRegular(_ info: stat) -> Bool { info.st_mode & S_IFMT == S_IFREG }
    static func isLink(_ info: stat) -> Bool { info.st_mode & S_IFMT == S_IFLNK }

    /// What the symbolic link at `path` points to, as written.
    static func linkTarget(_ path: String) throws -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { throw KeystoreError.io("readlink", path: path) }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Opens a file, retrying on `EINTR`; `nil` when it does not exist and `missingOK`.
    static func openFile(_ path: String, _ flags: Int32, mode: mode_t = 0, missingOK: Bool = false) throws -> Int32? {
        while true {
            let fd = open(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            if missingOK && errno == ENOENT { return nil }
            if errno == ELOOP {
                throw KeystoreError(.insecurePermissions, "refusing to follow a symbolic link", path: path, errno: errno)
            }
            throw KeystoreError.io("open", path: path)
        }
    }

    static func closeFile(_ fd: Int32) { _ = close(fd) }

    /// The names in a directory that start with `prefix`, opened without following a link;
    /// `nil` when it does not exist. Names are compared as bytes before any is kept, so a
    /// directory of many other entries costs time, not memory.
    static func directoryEntries(_ path: String, prefix: String) throws -> [String]? {
        guard let fd = try openFile(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, missingOK: true) else { return nil }
        guard let directory = fdopendir(fd) else {
            closeFile(fd)
            throw KeystoreError.io("fdopendir", path: path)
        }
        defer { closedir(directory) }
        let wanted = Array(prefix.utf8)
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(directory) else {
                // NULL is the end, or an error (EIO, ESTALE on NFS) that a partial list would hide.
                if errno != 0 { throw KeystoreError.io("readdir", path: path) }
                return names
            }
            let name: String? = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                let bytes = UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self)
                for (index, byte) in wanted.enumerated() where bytes[index] != byte { return nil }
                return String(cString: bytes)
            }
            if let name { names.append(name) }
        }
    }

    /// Reads a whole regular file opened without following links; `nil` when it is missing.
    /// `check` sees the status of the file as opened (a path checked before may have been
    /// replaced since) and may refuse it.
    static func readFile(_ path: String, checking check: ((stat) throws -> Void)? = nil) throws -> [UInt8]? {
        // O_NONBLOCK: a FIFO planted at the path must not hang the reader before fstat refuses it.
        guard let fd = try openFile(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, missingOK: true) else { return nil }
        defer { closeFile(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw KeystoreError.io("fstat", path: path) }
        guard isRegular(info) else { throw KeystoreError(.corruptFormat, "not a regular file", path: path) }
        try check?(info)
        let size = Int(info.st_size)
        guard size <= maximumFileSize else { throw KeystoreError(.corruptFormat, "file is too large", path: path) }
        var bytes = [UInt8](repeating: 0, count: size)
        var done = 0
        while done < size {
            let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + done, size - done) }
            if count < 0 {
                if errno == EINTR { continue }
                throw KeystoreError.io("read", path: path)
            }
            if count == 0 { break }
            done += count
        }
        if done < size { bytes.removeSubrange(done...) }
        return bytes
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
        var done = 0
        while done < bytes.count {
            let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, bytes.count - done) }
            if count < 0 {
                if errno == EINTR { continue }
                throw KeystoreError.io("write", path: path)
            }
            done += count
        }
    }

    static func syncFile(_ fd: Int32, path: String) throws {
        while fsync(fd) != 0 {
            if errno == EINTR { continue }
            throw KeystoreError.io("fsync", path: path)
        }
    }

    /// Flushes a directory's entries (renames, creations, deletions) to disk.
    static func fsyncDirectory(_ path: String) throws {
        guard let fd = try openFile(path, O_RDONLY | O_DIRECTORY) else { return }
        defer { closeFile(fd) }
        try syncFile(fd, path: path)
    }

    /// A fresh, unpredictable temporary name in `directory` (only where `O_TMPFILE` is
    /// unsupported); base64url names never start with `.`, so it cannot collide with one.
    static func temporaryPath(in directory: String) throws -> String {
        let random = try CryptoRuntime.randomBytes(9)
        return directory + "/.tmp." + Base64.urlEncode(random)
    }

    /// Writes `bytes` to a new temporary file in `directory` with exactly `mode`, optionally
    /// fsyncs it, and returns its path.
    static func writeTemporary(_ bytes: [UInt8], in directory: String, mode: mode_t, sync: Bool) throws -> String {
        let temporary = try temporaryPath(in: directory)
        guard let fd = try openFile(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: mode) else {
            throw KeystoreError.io("open", path: temporary, errno: ENOENT)
        }
        do {
            defer { closeFile(fd) }
            // The umask may have removed group bits a shared namespace needs.
            guard fchmod(fd, mode) == 0 else { throw KeystoreError.io("fchmod", path: temporary) }
            try writeAll(fd, bytes, path: temporary)
            if sync { try syncFile(fd, path: temporary) }
        } catch {
            _ = unlink(temporary)
            throw error
        }
        return temporary
    }

    /// Creates `path` with `bytes` only when it does not exist yet, atomically and durably,
    /// using `link(2)` so that concurrent creators agree on one winner. Returns `false` when
    /// another file was already there (the caller then reads it).
    static func createExclusively(_ bytes: [UInt8], at path: String, directory: String, mode: mode_t) throws -> Bool {
        let temporary = try writeTemporary(bytes, in: directory, mode: mode, sync: true)
        defer { _ = unlink(temporary) }
        if link(temporary, path) != 0 {
            if errno == EEXIST { return false }
            throw KeystoreError.io("link", path: path)
        }
        try fsyncDirectory(directory)
        return true
    }

    /// Creates a directory with exactly `mode` (umask and setgid included); returns `false`
    /// when it already existed.
    @discardableResult
    static func makeDirectory(_ path: String, mode: mode_t) throws -> Bool {
        if mkdir(path, mode & 0o777) != 0 {
            if errno == EEXIST { return false }
            throw KeystoreError.io("mkdir", path: path)
        }
        guard chmod(path, mode) == 0 else { throw KeystoreError.io("chmod", path: path) }
        let parent = parentDirectory(of: path)
        try fsyncDirectory(parent.isEmpty ? "/" : parent)
        return true
    }

    /// Creates `path` and any missing parents (parents 0700).
    static func makeDirectories(_ path: String, mode: mode_t) throws {
        if try status(path, followLinks: true) != nil { return }
        let parent = parentDirectory(of: path)
        if !parent.isEmpty && parent != path {
            try makeDirectories(parent, mode: 0o700)
        }
        try makeDirectory(path, mode: mode)
    }

    /// `path` with the symbolic links of its existing part resolved: the `realpath` of its
    /// longest existing ancestor, with the missing components appended. `path` itself when
    /// that cannot be resolved (a component not searchable, say).
    static func resolvingLinks(_ path: String) -> String {
        var existing = path
        var missing: [String] = []
        while true {
            if let resolved = realpath(existing, nil) {
                defer { free(resolved) }
                let base = String(cString: resolved)
                guard !missing.isEmpty else { return base }
                return (base == "/" ? "" : base) + "/" + missing.reversed().joined(separator: "/")
            }
            guard errno == ENOENT else { return path }
            let parent = parentDirectory(of: existing)
            guard parent != existing else { return path }
            missing.append(lastComponent(of: existing))
            existing = parent
        }
    }

    /// The working directory; `nil` when it cannot be read.
    static func currentDirectory() -> String? {
        guard let directory = getcwd(nil, 0) else { return nil }
        defer { free(directory) }
        return String(cString: directory)
    }

    static func lastComponent(of path: String) -> String {
        let components = path.utf8.split(separator: UInt8(ascii: "/"))
        return components.last.map { String(decoding: $0, as: UTF8.self) } ?? path
    }

    static func parentDirectory(of path: String) -> String {
        var bytes = Array(path.utf8)
        while bytes.count > 1 && bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return "." }
        if slash == 0 { return "/" }
        return String(decoding: bytes[..<slash], as: UTF8.self)
    }
}
