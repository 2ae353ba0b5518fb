import CCurlLoader
import SecureStorage

/// Which endpoints a provider token may be sent to.
///
/// `https://` anywhere; `http://` only to a loopback host (127.0.0.0/8, `::1`,
/// `localhost`) unless the caller opted in by name
/// (``FederationConfiguration/allowInsecureEndpoint``). The host is read with
/// libcurl's own URL parser, the one that later connects, so a URL such as
/// `http://127.0.0.1@attacker.example/` cannot pass the check as one host and be
/// sent to another.
enum EndpointRule {
    /// Checks `url` (named by `source` in errors) and returns it.
    ///
    /// - Throws: ``FederationError/Code/invalidConfiguration`` when the URL is not
    ///   http(s), cannot be parsed, or is plaintext to a non-loopback host without
    ///   the opt-in.
    static func check(_ url: String, source: String, allowInsecure: Bool) throws(FederationError) -> String {
        if let loadError = LibraryBootstrap.loadCurl() {
            throw FederationError(code: .invalidConfiguration, message: "\(source) cannot be checked: \(loadError)")
        }
        guard let parts = parse(url) else {
            throw FederationError(code: .invalidConfiguration, message: "\(source) '\(preview(url))' is not a valid URL")
        }
        switch parts.scheme {
        case "https":
            return url
        case "http":
            if allowInsecure || isLoopback(parts.host) { return url }
            throw FederationError(
                code: .invalidConfiguration,
                message: "\(source) '\(preview(url))' is plaintext http to a host that is not loopback: provider tokens would travel unencrypted; use https, or opt in with allowInsecureEndpoint (--allow-insecure-endpoint) for a local emulator"
            )
        default:
            throw FederationError(code: .invalidConfiguration, message: "\(source) '\(preview(url))' is not an http or https URL")
        }
    }

    /// Whether `url` is plaintext `http://` to a loopback host: such a request never goes
    /// through a proxy (``HTTPRequest/bypassesProxies``), which would see it in clear. (Through
    /// a proxy, `https://` is a tunnel it cannot read.) Only a `http://` URL is parsed, so a
    /// client of AWS's own endpoints does not load libcurl before its first request.
    static func isPlaintextLoopbackURL(_ url: String) -> Bool {
        guard url.utf8.count > 7, url.prefix(7).lowercased() == "http://" else { return false }
        guard LibraryBootstrap.loadCurl() == nil, let parts = parse(url) else { return false }
        return isLoopback(parts.host)
    }

    /// Whether `host` (as libcurl reports it: brackets kept around IPv6) is loopback.
    static func isLoopback(_ host: String) -> Bool {
        LoopbackHost.contains(host)
    }

    /// Scheme and host as libcurl parses them, or `nil` when it cannot.
    static func parse(_ url: String) -> (scheme: String, host: String)? {
        guard let handle = ib_curl_url() else { return nil }
        defer { ib_curl_url_cleanup(handle) }
        // No scheme guessing: a URL without one is not an endpoint.
        guard ib_curl_url_set(handle, CURLUPART_URL, url, 0) == CURLUE_OK else { return nil }
        guard let scheme = part(handle, CURLUPART_SCHEME), let host = part(handle, CURLUPART_HOST) else { return nil }
        return (scheme.lowercased(), host)
    }

    private static func part(_ handle: OpaquePointer, _ which: CURLUPart) -> String? {
        var value: UnsafeMutablePointer<CChar>?
        guard ib_curl_url_get(handle, which, &value, 0) == CURLUE_OK, let value else { return nil }
        defer { ib_curl_free(value) }
        return String(cString: value)
    }

    /// The URL for an error message: without what comes before its last `@` (a user name and
    /// password, a proxy's or a token pasted there: from the scheme's `://` on, or from the
    /// start when there is none before it), bounded, control characters shown as `?`.
    static func preview(_ url: String) -> String {
        var shown = Substring(url)
        // On bytes: an '@' followed by a combining mark is part of a larger Character.
        if let at = url.utf8.lastIndex(of: UInt8(ascii: "@")) {
            let before = url.utf8[..<at]
            var authority = url.startIndex
            if let colon = before.indices.first(where: { before[$0...].starts(with: "://".utf8) }) {
                authority = url.utf8.index(colon, offsetBy: 3)
            }
            shown = Substring(String(url.unicodeScalars[..<authority]) + "…" + String(url.unicodeScalars[at...]))
        }
        return String(String.UnicodeScalarView(shown.unicodeScalars.prefix(200).map { $0.value < 0x20 || $0.value == 0x7F ? "?" : $0 }))
    }
}
