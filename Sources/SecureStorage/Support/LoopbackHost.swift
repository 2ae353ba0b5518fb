/// Host names that always mean this machine: what is sent to them never crosses a network.
package enum LoopbackHost {
    /// Whether `host` is `localhost`, an IPv4 address in 127.0.0.0/8 (dotted decimal) or `::1`
    /// (with or without brackets, as libcurl reports IPv6 hosts).
    package static func contains(_ host: String) -> Bool {
        let host = host.lowercased()
        if host == "localhost" || host == "[::1]" || host == "::1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4 else { return false }
        var values: [Int] = []
        for octet in octets {
            guard (1...3).contains(octet.count), octet.allSatisfy(\.isASCII), let value = Int(octet), value <= 255 else {
                return false
            }
            values.append(value)
        }
        return values[0] == 127
    }
}
