import Federation
import SecureStorage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// libpq's password file (`$PGPASSFILE`, else `~/.pgpass`): where a `postgres://` keystore URL
/// without a password finds one. The password then appears neither on a command line, which
/// other users read in the process list, nor in an AWS config file's `credential_process`
/// line.
///
/// Read as libpq reads it (`passwordFromFile` in `fe-connect.c`), byte for byte: one
/// `host:port:database:user:password` per line; a field that is exactly `*` matches anything;
/// `\` makes the next byte literal (`\:`, `\\`, `\*`); lines starting with `#` are comments;
/// trailing carriage returns and newlines are stripped; the password ends at the next
/// unescaped `:`; the first line that matches wins. A file that anyone but its owner may
/// read, write or execute, that is not a plain file, or that is larger than ``maximumBytes``
/// is not used, and an error connecting says so.
package enum PostgresPassFile {
    /// Larger files are not used: a password file holds a few lines.
    static let maximumBytes = 64 * 1024

    /// What looking the password up gave.
    package enum Lookup: Sendable {
        /// No file, or no line for this connection (not an error: most users have none).
        case none
        case password(String)
        /// The file exists but is not used; the reason, for an error message (never the
        /// file's contents).
        case ignored(String)
    }

    /// The password for the connection from the file `$PGPASSFILE` names, else `~/.pgpass`:
    /// checked before it is opened, opened without waiting (a FIFO swapped in must not hang
    /// the command), checked again, read, and wiped once looked up.
    package static func lookup(
        home: String?,
        environment: (String) -> String?,
        host: String,
        port: Int,
        database: String,
        user: String
    ) -> Lookup {
        guard let path = environment("PGPASSFILE") ?? home.map({ $0 + "/.pgpass" }) else { return .none }
        var named = stat()
        guard stat(path, &named) == 0 else {
            let code = errno
            return code == ENOENT ? .none : .ignored("password file \(path) cannot be examined: \(String(cString: strerror(code)))")
        }
        if let refused = refusal(of: named, at: path) { return .ignored(refused) }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            return .ignored("password file \(path) cannot be opened: \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var opened = stat()
        guard fstat(descriptor, &opened) == 0 else {
            return .ignored("password file \(path) cannot be examined: \(String(cString: strerror(errno)))")
        }
        guard opened.st_dev == named.st_dev && opened.st_ino == named.st_ino else {
            return .ignored("password file \(path) was replaced while it was opened")
        }
        if let refused = refusal(of: opened, at: path) { return .ignored(refused) }
        var contents: [UInt8]
        do {
            contents = try BoundedInput.readOpenedFile(descriptor, limit: maximumBytes)
        } catch {
            return .ignored(BoundedInput.describe(error, source: "password file \(path)"))
        }
        defer { CryptoRuntime.cleanse(&contents) }
        // Grown since it was checked: as large a file is not read either.
        guard contents.count <= maximumBytes else { return .ignored("password file \(path) is larger than \(maximumBytes) bytes") }
        guard var password = self.password(in: contents[...], host: host, port: String(port), database: database, user: user) else {
            return .none
        }
        defer { CryptoRuntime.cleanse(&password) }
        return .password(String(decoding: password, as: UTF8.self))
    }

    /// Why a file with `status` is not used, or `nil` when it may be.
    private static func refusal(of status: stat, at path: String) -> String? {
        guard status.st_mode & S_IFMT == S_IFREG else { return "password file \(path) is not a plain file" }
        guard status.st_mode & 0o077 == 0 else {
            return "password file \(path) has group or world access; permissions should be u=rw (0600) or less"
        }
        guard status.st_size <= maximumBytes else { return "password file \(path) is larger than \(maximumBytes) bytes" }
        return nil
    }

    /// The password the first matching line of `contents` gives, unescaped, or `nil`.
    static func password(in contents: ArraySlice<UInt8>, host: String, port: String, database: String, user: String) -> [UInt8]? {
        let tokens = [host, port, database, user].map { Array($0.utf8) }
        for var line in contents.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            guard line.first != UInt8(ascii: "#") else { continue }
            while let last = line.last, last == UInt8(ascii: "\r") || last == UInt8(ascii: "\n") { line = line.dropLast() }
            var rest = line
            var matched = true
            for token in tokens {
                guard let after = fieldMatches(rest, token) else {
                    matched = false
                    break
                }
                rest = after
            }
            if matched { return unescapedPassword(rest) }
        }
        return nil
    }

    /// What follows the field at the start of `line` when the field matches `token`, else
    /// `nil` (libpq's `pwdfMatchesString`).
    private static func fieldMatches(_ line: ArraySlice<UInt8>, _ token: [UInt8]) -> ArraySlice<UInt8>? {
        let colon = UInt8(ascii: ":")
        var index = line.startIndex
        if line.count >= 2 && line[index] == UInt8(ascii: "*") && line[index + 1] == colon { return line[(index + 2)...] }
        var tokenIndex = 0
        while index < line.endIndex {
            var escaped = false
            if line[index] == UInt8(ascii: "\\") {
                index += 1
                escaped = true
                guard index < line.endIndex else { return nil }
            }
            if line[index] == colon && tokenIndex == token.count && !escaped { return line[(index + 1)...] }
            guard tokenIndex < token.count, line[index] == token[tokenIndex] else { return nil }
            index += 1
            tokenIndex += 1
        }
        return nil
    }

    /// The password field: up to the next unescaped `:`, each `\` making the next byte
    /// literal (a `\` at the very end stays).
    private static func unescapedPassword(_ field: ArraySlice<UInt8>) -> [UInt8] {
        var password: [UInt8] = []
        var index = field.startIndex
        while index < field.endIndex && field[index] != UInt8(ascii: ":") {
            if field[index] == UInt8(ascii: "\\") && index + 1 < field.endIndex { index += 1 }
            password.append(field[index])
            index += 1
        }
        return password
    }
}
