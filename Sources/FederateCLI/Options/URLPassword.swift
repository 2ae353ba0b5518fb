/// Where the password sits in a URL's user information (`scheme://user:password@host/…`),
/// found on bytes: the CLI registers it as a secret before parsing anything, and
/// `federate-server` overwrites it in its own command line.
package enum URLPassword {
    /// The password's byte range: after the first `:` of the user information, which ends at
    /// the authority's last `@` (the authority ends at the first `/` or `?` after `://`, as
    /// `PostgresKeystore.Configuration(url:)` reads it: a `#` there is part of the password,
    /// so it does not end the authority here either); `nil` when there is none, or it is empty.
    package static func range<Bytes: RandomAccessCollection<UInt8>>(in bytes: Bytes) -> Range<Bytes.Index>? {
        let separator = Array("://".utf8)
        guard let scheme = bytes.indices.first(where: { bytes[$0...].starts(with: separator) }) else { return nil }
        let authorityStart = bytes.index(scheme, offsetBy: separator.count)
        let authority = bytes[authorityStart...]
        let authorityEnd = authority.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") } ?? bytes.endIndex
        guard let at = bytes[authorityStart..<authorityEnd].lastIndex(of: UInt8(ascii: "@")),
              let colon = bytes[authorityStart..<at].firstIndex(of: UInt8(ascii: ":"))
        else { return nil }
        let start = bytes.index(after: colon)
        return start < at ? start..<at : nil
    }
}
