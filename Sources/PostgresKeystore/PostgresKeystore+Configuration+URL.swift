extension PostgresKeystore.Configuration {
    /// Parses `postgres://user:password@host:port/database?sslmode=…` (or `postgresql://`).
    ///
    /// Every part is percent-decoded, so a password holding `@`, `:`, `/`, `?` or `#` is
    /// written `%40`, `%3A`, `%2F`, `%3F`, `%23`. An unescaped `@` in the password is still
    /// read as meant (the user information ends at the last `@` before the host), but a `/`
    /// or `?` in it would end the host early and send the rest of the password as a database
    /// name or parameter: a URL with an `@` after its host is therefore refused, with a
    /// reason that quotes none of it. An IPv6 host is written in brackets (`[::1]`). The port
    /// defaults to 5432 and the database to the user's name. Query parameters:
    ///
    /// - `sslmode`: `disable`, `allow`/`prefer`, `require`, `verify-ca`, `verify-full`; see
    ///   ``PostgresKeystore/TLSMode``. Without it, `verify-full`, or `disable` for a host on
    ///   this machine (as ``tls`` says).
    /// - `sslrootcert`: a PEM file of trusted certificate authorities.
    /// - `connect_timeout`: seconds allowed to open a connection.
    ///
    /// Any other parameter is refused, so a misspelt `sslmode` cannot silently turn TLS off.
    ///
    /// - Throws: ``PostgresURLError``, whose reason never contains the password.
    public init(url: String) throws(PostgresURLError) {
        var rest = Substring(url)
        if rest.hasPrefix("postgres://") {
            rest = rest.dropFirst("postgres://".count)
        } else if rest.hasPrefix("postgresql://") {
            rest = rest.dropFirst("postgresql://".count)
        } else {
            throw PostgresURLError("the URL must start with postgres:// or postgresql://")
        }
        // The host ends at the first '/' or '?' after the last '@'. An '@' after that point
        // means a '/' or '?' in the password (or an '@' in a parameter): refused, since any
        // reading of it would send part of the password somewhere as another part.
        // Delimiters are found on bytes, never Characters: a '/' followed by a combining mark
        // is one Character, and `federate` finds the password on bytes (URLPassword).
        if let at = rest.utf8.lastIndex(of: UInt8(ascii: "@")),
           let end = rest.utf8.firstIndex(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") }), end < at {
            throw PostgresURLError(
                "the URL has an '@' after its host: percent-encode '/', '?', '#' and '@' in the user name and password (%2F, %3F, %23, %40), and '@' in a parameter value (%40)")
        }
        var query: Substring = ""
        if let mark = rest.utf8.firstIndex(of: UInt8(ascii: "?")) {
            query = rest[rest.utf8.index(after: mark)...]
            rest = rest[..<mark]
        }
        var path: Substring?
        if let slash = rest.utf8.firstIndex(of: UInt8(ascii: "/")) {
            path = rest[rest.utf8.index(after: slash)...]
            rest = rest[..<slash]
        }
        // The user information ends at the last '@' (an unescaped '@' in a password is common).
        var userInfo: Substring?
        if let at = rest.utf8.lastIndex(of: UInt8(ascii: "@")) {
            userInfo = rest[..<at]
            rest = rest[rest.utf8.index(after: at)...]
        }

        var username: String?
        var password: String?
        if let userInfo {
            if let colon = userInfo.utf8.firstIndex(of: UInt8(ascii: ":")) {
                username = try Self.decode(userInfo[..<colon], part: "user name")
                password = try Self.decode(userInfo[userInfo.utf8.index(after: colon)...], part: "password")
            } else {
                username = try Self.decode(userInfo, part: "user name")
            }
        }
        guard let username, !username.isEmpty else {
            throw PostgresURLError("the URL names no user (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)")
        }

        let (host, port) = try Self.hostAndPort(rest)
        var database: String?
        if let path, !path.isEmpty {
            guard !path.utf8.contains(UInt8(ascii: "/")) else {
                throw PostgresURLError("the database name must not contain '/' (write it as %2F)")
            }
            database = try Self.decode(path, part: "database name")
        }

        self.init(host: host, port: port, username: username, password: password, database: database)
        for pair in query.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = try Self.decode(Substring(parts[0]), part: "parameter name")
            let value = parts.count > 1 ? try Self.decode(Substring(parts[1]), part: "value of \(name)") : ""
            switch name {
            case "sslmode":
                guard let mode = PostgresKeystore.TLSMode(sslmode: value) else {
                    throw PostgresURLError("sslmode '\(value)' is not one of disable, allow, prefer, require, verify-ca, verify-full")
                }
                tls = mode
            case "sslrootcert":
                guard !value.isEmpty else { throw PostgresURLError("sslrootcert is empty") }
                rootCertificatePath = value
            case "connect_timeout":
                guard let seconds = Int(value), seconds > 0, seconds <= 3600 else {
                    throw PostgresURLError("connect_timeout must be a whole number of seconds between 1 and 3600")
                }
                connectTimeout = .seconds(seconds)
            default:
                throw PostgresURLError("unsupported URL parameter '\(name)' (supported: sslmode, sslrootcert, connect_timeout)")
            }
        }
    }

    private static func hostAndPort(_ text: Substring) throws(PostgresURLError) -> (String, Int) {
        var hostPart = text
        var portPart: Substring?
        let bracketed = text.utf8.first == UInt8(ascii: "[")
        if bracketed {
            guard let close = text.utf8.firstIndex(of: UInt8(ascii: "]")) else {
                throw PostgresURLError("an IPv6 host must be closed with ']'")
            }
            hostPart = text[text.utf8.index(after: text.startIndex)..<close]
            let after = text[text.utf8.index(after: close)...]
            if after.utf8.first == UInt8(ascii: ":") {
                portPart = after[after.utf8.index(after: after.startIndex)...]
            } else if !after.isEmpty {
                throw PostgresURLError("unexpected characters after the IPv6 host")
            }
        } else if let colon = text.utf8.lastIndex(of: UInt8(ascii: ":")) {
            hostPart = text[..<colon]
            portPart = text[text.utf8.index(after: colon)...]
        }
        // `u@::1/db` would read as host ":", port 1.
        guard bracketed || !hostPart.utf8.contains(UInt8(ascii: ":")) else {
            throw PostgresURLError("an IPv6 host must be written in brackets ([::1])")
        }
        let host = try decode(hostPart, part: "host")
        guard !host.isEmpty else { throw PostgresURLError("the URL names no host") }
        var port = 5432
        if let portPart {
            guard let parsed = Int(portPart), parsed > 0, parsed < 65536 else {
                throw PostgresURLError("the port must be a number between 1 and 65535")
            }
            port = parsed
        }
        return (host, port)
    }

    /// Percent-decodes one part; the part's name, never its value, goes into an error.
    private static func decode(_ text: Substring, part: String) throws(PostgresURLError) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                throw PostgresURLError("the \(part) holds a malformed percent escape")
            }
            bytes.append(high << 4 | low)
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else {
            throw PostgresURLError("the \(part) is not UTF-8 once percent-decoded")
        }
        guard !decoded.utf8.contains(0) else {
            throw PostgresURLError("the \(part) contains a NUL character")
        }
        return decoded
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
