#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Host names that always mean this machine: what is sent to them never crosses a network.
package enum LoopbackHost {
    /// Whether `host` is `localhost`, an IPv4 address in 127.0.0.0/8 (dotted decimal), or the
    /// IPv6 loopback address or an IPv4-mapped one in 127.0.0.0/8, in any spelling
    /// (`::1`, `0:0:0:0:0:0:0:1`, `::ffff:127.0.0.1`; with or without brackets, as libcurl
    /// reports IPv6 hosts).
    package static func contains(_ host: String) -> Bool {
        let host = host.lowercased()
        if host == "localhost" { return true }
        if isDottedLoopback(host) { return true }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard bare.contains(":") else { return false }
        var address = in6_addr()
        guard inet_pton(AF_INET6, bare, &address) == 1 else { return false }
        let bytes = withUnsafeBytes(of: address) { Array($0) }
        if bytes == [UInt8](repeating: 0, count: 15) + [1] { return true }
        // ::ffff:a.b.c.d
        return bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF && bytes[12] == 127
    }

    /// Four decimal octets, the first 127. Digits only, without leading zeros: the resolver
    /// reads `0127` as octal (87) and takes `+1` or `08` for a host name to look up.
    private static func isDottedLoopback(_ host: String) -> Bool {
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4 else { return false }
        var values: [Int] = []
        for octet in octets {
            guard (1...3).contains(octet.count), octet.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                  octet.count == 1 || octet.first != "0", let value = Int(octet), value <= 255
            else {
                return false
            }
            values.append(value)
        }
        return values[0] == 127
    }
}
