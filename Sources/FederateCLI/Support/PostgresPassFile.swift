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
/// As libpq reads it: one `host:port:database:user:password` per line, each of the first four
/// a value or `*`, with `\:` and `\\` for a literal `:` and `\`; lines starting with `#` are
/// comments; the first line that matches wins. A file that anyone but its owner may read or
/// write, that is not a regular file, or that is larger than ``maximumBytes`` is ignored,
/// and an error connecting says so.
package struct PostgresPassFile: Sendable {
    struct Entry: Sendable, Equatable {
        var host: String
        var port: String
        var database: String
        var user: String
        var password: String
    }

    /// Larger files are ignored: a password file holds a few lines.
    static let maximumBytes = 64 * 1024

    let entries: [Entry]

    /// Parses the file's text; lines with fewer than five fields are skipped, as libpq does.
    package init(text: String) {
        entries = text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
            .compactMap { line in line.hasPrefix("#") ? nil : Self.entry(String(line)) }
    }

    /// The password of the first entry that matches, or `nil`.
    package func password(host: String, port: Int, database: String, user: String) -> String? {
        let port = String(port)
        return entries.first { entry in
            Self.matches(entry.host, host) && Self.matches(entry.port, port)
                && Self.matches(entry.database, database) && Self.matches(entry.user, user)
        }?.password
    }

    private static func matches(_ pattern: String, _ value: String) -> Bool {
        pattern == "*" || pattern == value
    }

    /// Splits a line at unescaped colons into five fields; the password is the rest of the
    /// line (libpq reads it to the line's end, unescaping as it goes).
    private static func entry(_ line: String) -> Entry? {
        var fields: [String] = []
        var field = ""
        var escaped = false
        for character in line {
            if escaped {
                field.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == ":" && fields.count < 4 {
                fields.append(field)
                field = ""
            } else {
                field.append(character)
            }
        }
        fields.append(field)
        guard fields.count == 5 else { return nil }
        return Entry(host: fields[0], port: fields[1], database: fields[2], user: fields[3], password: fields[4])
    }
}

extension PostgresPassFile {
    /// What reading the file gave.
    package enum Loaded: Sendable {
        /// There is no file (not an error: most users have none).
        case none
        case file(PostgresPassFile)
        /// The file exists but is not used; the reason, for a warning.
        case ignored(String)
    }

    /// The file `$PGPASSFILE` names, else `~/.pgpass`: opened without waiting (a FIFO planted
    /// there must not hang the command), checked, and read.
    package static func load(home: String?, environment: (String) -> String?) -> Loaded {
        guard let path = environment("PGPASSFILE") ?? home.map({ $0 + "/.pgpass" }) else { return .none }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let code = errno
            return code == ENOENT ? .none : .ignored("password file \(path) cannot be opened: \(String(cString: strerror(code)))")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            return .ignored("password file \(path) cannot be examined: \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else { return .ignored("password file \(path) is not a plain file") }
        guard status.st_mode & 0o077 == 0 else {
            return .ignored("password file \(path) has group or world access; permissions should be u=rw (0600) or less")
        }
        guard status.st_size <= maximumBytes else {
            return .ignored("password file \(path) is larger than \(maximumBytes) bytes")
        }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress! + filled, $0.count - filled) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            filled += count
        }
        defer { for index in bytes.indices { bytes[index] = 0 } }
        return .file(PostgresPassFile(text: String(decoding: bytes[..<filled], as: UTF8.self)))
    }
}
