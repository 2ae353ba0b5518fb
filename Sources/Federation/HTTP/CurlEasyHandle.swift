import CCurlLoader
import SecureStorage

/// One libcurl easy handle configured for one ``HTTPRequest``, plus everything libcurl
/// reads or writes through raw pointers while the transfer runs (the header list, the
/// request body, the response accumulator).
///
/// libcurl forbids using an easy handle from two threads at once, so this wrapper is
/// deliberately **not** `Sendable`: it is created, driven and destroyed only on the
/// ``CurlMultiDriver`` thread (the same rule corelibs applies to its `_EasyHandle`).
/// Because the callbacks receive an unretained pointer to this object, and `deinit` resets
/// the handle for reuse (which libcurl allows only for a handle in no multi handle), it must
/// stay alive until it has been removed from the multi handle; the driver loop removes it
/// while its table of active transfers still holds it.
final class CurlEasyHandle {
    /// The transfer's id, also stored in `CURLOPT_PRIVATE` to find this object again
    /// from a `CURLMsg`.
    let id: UInt64
    /// The raw `CURL *`; owned, given back to `pool` in `deinit`.
    let rawHandle: UnsafeMutableRawPointer
    /// Where `rawHandle` came from and goes back to.
    private let pool: CurlEasyHandlePool
    /// The cap on the body, from ``HTTPLimits/maxResponseBytes``.
    let maxResponseBytes: Int

    /// The request headers; owned, freed in `deinit` (after the easy handle).
    private var headerList: UnsafeMutablePointer<curl_slist>?
    /// The request body. libcurl keeps the pointer (`CURLOPT_POSTFIELDS`) rather than a
    /// copy, so the buffer lives exactly as long as the easy handle.
    private var bodyBuffer: UnsafeMutableRawBufferPointer?

    /// Status of the final response, from its status line.
    private(set) var statusFromHeaders: Int?
    /// Header fields of the final response, names lowercased.
    private(set) var responseHeaders: [(name: String, value: String)] = []
    /// The body received so far, never longer than `maxResponseBytes`.
    private(set) var responseBody: [UInt8] = []
    /// Set when the write callback refused data because of the cap, so the resulting
    /// `CURLE_WRITE_ERROR` can be reported as ``TransportError/Kind/responseTooLarge``.
    private(set) var exceededCap = false
    /// Whether the header block of the current response has ended (later header-callback
    /// lines are trailers, which are not collected).
    private var headerBlockEnded = false

    /// Takes an easy handle from `pool` and configures it for `request`.
    ///
    /// The handle must be out of any multi handle before this object goes away: `deinit`
    /// resets it for the next transfer.
    ///
    /// - Throws: ``TransportError`` with kind ``TransportError/Kind/invalidRequest`` when
    ///   the request cannot be expressed (header injection, an option libcurl refuses).
    init(id: UInt64, request: HTTPRequest, pool: CurlEasyHandlePool) throws(TransportError) {
        guard let handle = pool.take() else {
            throw TransportError(kind: .other, message: "curl_easy_init failed")
        }
        self.id = id
        self.rawHandle = handle
        self.pool = pool
        self.maxResponseBytes = max(0, request.limits.maxResponseBytes)
        // From here on `deinit` cleans up whatever was set, also when configure throws.
        try configure(for: request)
    }

    deinit {
        // Reset (or freed) first: the handle's options point into the header list and body.
        pool.recycle(rawHandle)
        if let headerList { ib_curl_slist_free_all(headerList) }
        bodyBuffer?.deallocate()
    }

    /// The status code libcurl recorded for the last response.
    var responseCode: Int {
        var code = 0
        _ = ib_curl_easy_getinfo_long(rawHandle, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    // MARK: Configuration

    private func configure(for request: HTTPRequest) throws(TransportError) {
        try set(CURLOPT_URL, string: request.url)
        // Only plain and TLS HTTP, also for anything a proxy or Location might suggest.
        try set(CURLOPT_PROTOCOLS_STR, string: "http,https")
        try set(CURLOPT_REDIR_PROTOCOLS_STR, string: "http,https")
        // Redirects are never followed: a 3xx is handed back to the caller as is.
        try set(CURLOPT_FOLLOWLOCATION, 0)
        // TLS verification is always on; there is deliberately no way to turn it off.
        try set(CURLOPT_SSL_VERIFYPEER, 1)
        try set(CURLOPT_SSL_VERIFYHOST, 2)
        if let file = request.limits.certificateAuthorityFile {
            // Only these authorities: the file, and no CA directory (Debian's libcurl also
            // reads /etc/ssl/certs by default). The directory is pointed at the file itself,
            // where OpenSSL's lookups of `<hash>.0` find nothing: NULL would do on libcurl
            // before 8.21, which since puts the built-in directory back for NULL. Left at its
            // default, the directory's authorities were trusted beside the file's. A returned
            // handle is reset to the defaults.
            try set(CURLOPT_CAINFO, string: file)
            try set(CURLOPT_CAPATH, string: file)
        }
        // libcurl must not use signals (SIGALRM for DNS timeouts) in a threaded process.
        try set(CURLOPT_NOSIGNAL, 1)
        try set(CURLOPT_TCP_KEEPALIVE, 1)
        // A transfer that ends (timed out, cancelled, shut down) while its name is still being
        // resolved lets the resolver thread go instead of joining it: the join would hold the
        // one driver thread, and every other transfer, cancellation and shutdown, until
        // getaddrinfo gives up (tens of seconds against a DNS server that drops queries).
        // libcurl before 7.87 does not know the option and joins as before.
        _ = ib_curl_easy_setopt_long(rawHandle, CURLOPT_QUICK_EXIT, 1)
        // An empty proxy turns off the environment's (libcurl reads `http_proxy` and the like).
        if request.bypassesProxies { try set(CURLOPT_PROXY, string: "") }
        // Hide the proxy's own `HTTP/1.1 200 Connection established` block.
        try set(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
        // A zero timeout means "none" to libcurl, so never pass one.
        try set(CURLOPT_CONNECTTIMEOUT_MS, Self.milliseconds(request.limits.connectTimeout))
        try set(CURLOPT_TIMEOUT_MS, Self.milliseconds(request.limits.requestTimeout))
        // Refuse a response whose Content-Length already exceeds the cap before any body
        // arrives; the write callback enforces the cap for chunked or lying responses.
        try check(ib_curl_easy_setopt_off_t(rawHandle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(maxResponseBytes)))
        try check(ib_curl_easy_setopt_pointer(rawHandle, CURLOPT_PRIVATE, UnsafeMutableRawPointer(bitPattern: UInt(id))))

        try configureMethodAndBody(request)
        try configureHeaders(request)

        let context = Unmanaged.passUnretained(self).toOpaque()
        try check(ib_curl_easy_setopt_data_callback(rawHandle, CURLOPT_WRITEFUNCTION, curlWriteCallback))
        try check(ib_curl_easy_setopt_pointer(rawHandle, CURLOPT_WRITEDATA, context))
        try check(ib_curl_easy_setopt_data_callback(rawHandle, CURLOPT_HEADERFUNCTION, curlHeaderCallback))
        try check(ib_curl_easy_setopt_pointer(rawHandle, CURLOPT_HEADERDATA, context))
    }

    private func configureMethodAndBody(_ request: HTTPRequest) throws(TransportError) {
        let method = request.method
        guard !method.isEmpty, method.utf8.allSatisfy(Self.isTokenByte) else {
            throw TransportError(kind: .invalidRequest, message: "invalid HTTP method")
        }
        switch method {
        case "GET" where request.body.isEmpty:
            try set(CURLOPT_HTTPGET, 1)
        case "HEAD" where request.body.isEmpty:
            try set(CURLOPT_NOBODY, 1)
        default:
            // Any other method sends the body from memory. The buffer is never empty so
            // libcurl never falls back to reading stdin through its default read callback.
            let buffer = UnsafeMutableRawBufferPointer.allocate(
                byteCount: max(1, request.body.count), alignment: 1)
            bodyBuffer = buffer
            request.body.withUnsafeBytes { source in
                if let base = source.baseAddress, source.count > 0 {
                    buffer.baseAddress!.copyMemory(from: base, byteCount: source.count)
                }
            }
            try check(ib_curl_easy_setopt_off_t(
                rawHandle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)))
            try check(ib_curl_easy_setopt_pointer(rawHandle, CURLOPT_POSTFIELDS, buffer.baseAddress))
            if method != "POST" {
                try set(CURLOPT_CUSTOMREQUEST, string: method)
            }
        }
    }

    private func configureHeaders(_ request: HTTPRequest) throws(TransportError) {
        var lines: [String] = []
        var hasContentType = false
        var hasExpect = false
        for (name, value) in request.headers {
            // Reject anything that could smuggle a second header or request.
            guard !name.isEmpty, name.utf8.allSatisfy(Self.isTokenByte),
                  !value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 })
            else {
                throw TransportError(kind: .invalidRequest, message: "invalid HTTP header field")
            }
            let lowered = name.lowercased()
            hasContentType = hasContentType || lowered == "content-type"
            hasExpect = hasExpect || lowered == "expect"
            // `Name:` alone would remove a header in libcurl; `Name;` sends it empty.
            // Trimmed on UTF-8 bytes: as Characters every value would go through grapheme
            // breaking, a measurable part of a request's CPU (see docs/performance.md).
            let trimmed = Substring(value.utf8.trimmingSpacesAndTabs)
            lines.append(trimmed.isEmpty ? "\(name);" : "\(name): \(trimmed)")
        }
        // No `Expect: 100-continue` round trip for larger bodies: it costs a wait.
        if !hasExpect { lines.append("Expect:") }
        // libcurl would label a body `application/x-www-form-urlencoded`; say nothing
        // rather than something wrong when the caller gave no type.
        if !hasContentType, bodyBuffer != nil { lines.append("Content-Type:") }

        for line in lines {
            guard let appended = ib_curl_slist_append(headerList, line) else {
                throw TransportError(kind: .other, message: "curl_slist_append failed")
            }
            headerList = appended
        }
        try check(ib_curl_easy_setopt_slist(rawHandle, CURLOPT_HTTPHEADER, headerList))
    }

    private func set(_ option: CURLoption, _ value: Int) throws(TransportError) {
        try check(ib_curl_easy_setopt_long(rawHandle, option, value))
    }

    /// libcurl copies string options (since 7.17), so the Swift string may go away after.
    private func set(_ option: CURLoption, string value: String) throws(TransportError) {
        try check(ib_curl_easy_setopt_string(rawHandle, option, value))
    }

    private func check(_ code: CURLcode) throws(TransportError) {
        guard code == CURLE_OK else {
            // A refused option means the request asked for something libcurl cannot do.
            throw TransportError(
                kind: .invalidRequest,
                curlCode: Int32(bitPattern: code.rawValue),
                message: String(cString: ib_curl_easy_strerror(code)))
        }
    }

    /// Whole milliseconds, at least 1 (libcurl reads 0 as "no timeout") and at most half of
    /// `Int.max` (libcurl adds it to the current time).
    private static func milliseconds(_ duration: Duration) -> Int {
        Int(min(max(1, duration.wholeMilliseconds), Int64(Int.max / 2)))
    }

    /// RFC 9110 `tchar`: the bytes allowed in a method or header name.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    // MARK: Callbacks (called by libcurl on the driver thread)

    /// Appends body bytes, refusing (returning a short count) as soon as the body would
    /// exceed the cap, so nothing past it is ever buffered.
    fileprivate func receiveBody(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard bytes.count <= maxResponseBytes - responseBody.count else {
            exceededCap = true
            return 0
        }
        responseBody.append(contentsOf: bytes)
        return bytes.count
    }

    /// Collects one header line. A status line starts a new response (after `100
    /// Continue` or a proxy's reply), so it resets what was collected.
    ///
    /// One parser, on bytes: the framing (line break, colon, spaces, tabs, folding) is
    /// ASCII, and UTF-8 never uses those bytes inside a multi-byte character, so a line
    /// with non-ASCII bytes splits the same way; its text is decoded as UTF-8 (invalid
    /// bytes become U+FFFD) only for the name and the value.
    fileprivate func receiveHeaderLine(_ bytes: UnsafeRawBufferPointer) {
        // Strip the line break as bytes: in Swift "\r\n" is one Character.
        var end = bytes.count
        while end > 0, bytes[end - 1] == 0x0D || bytes[end - 1] == 0x0A { end -= 1 }
        let line = bytes[..<end]

        if line.starts(with: Self.statusPrefix) {
            startResponse(line)
            return
        }
        guard !headerBlockEnded else { return }
        if line.isEmpty {
            headerBlockEnded = true
        } else if line.first == 0x20 || line.first == 0x09, !responseHeaders.isEmpty {
            // Obsolete line folding: continue the previous value.
            responseHeaders[responseHeaders.count - 1].value += " " + Self.text(line.trimmingSpacesAndTabs)
        } else if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
            let name = Self.text(line[..<colon].trimmingSpacesAndTabs, lowercasingASCII: true)
            let value = Self.text(line[(colon + 1)...].trimmingSpacesAndTabs)
            responseHeaders.append((name: name, value: value))
        }
    }

    private static let statusPrefix = Array("HTTP/".utf8)

    /// `bytes` as UTF-8 text, optionally with ASCII letters lowercased (header names are
    /// ASCII tokens; a non-ASCII byte is left as it is).
    private static func text(_ bytes: Slice<UnsafeRawBufferPointer>, lowercasingASCII lowercase: Bool = false) -> String {
        let bytes = UnsafeRawBufferPointer(rebasing: bytes)
        guard lowercase, bytes.contains(where: { $0 >= 0x41 && $0 <= 0x5A }) else {
            return String(decoding: bytes, as: UTF8.self)
        }
        // Lowercased in place into the new string's storage; nginx and AWS send `Content-Type`.
        let lowered = String(unsafeUninitializedCapacity: bytes.count) { buffer in
            for (index, byte) in bytes.enumerated() {
                buffer[index] = byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
            }
            return bytes.count
        }
        // Validated like `String(decoding:)`: bytes that are not UTF-8 become U+FFFD.
        return lowered
    }

    /// A status line (`HTTP/1.1 200 OK`): a new response begins.
    private func startResponse(_ line: Slice<UnsafeRawBufferPointer>) {
        responseHeaders.removeAll(keepingCapacity: true)
        headerBlockEnded = false
        let fields = line.split(separator: 0x20, maxSplits: 2)
        statusFromHeaders = fields.count > 1 ? Int(Self.text(fields[1])) : nil
    }
}

@available(*, unavailable, message: "an easy handle is confined to the curl driver thread")
extension CurlEasyHandle: Sendable {}

/// `CURLOPT_WRITEFUNCTION`: `userdata` is the unretained ``CurlEasyHandle``.
private func curlWriteCallback(
    _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?
) -> Int {
    guard let userdata else { return 0 }
    let handle = Unmanaged<CurlEasyHandle>.fromOpaque(userdata).takeUnretainedValue()
    return handle.receiveBody(UnsafeRawBufferPointer(start: buffer, count: size * count))
}

/// `CURLOPT_HEADERFUNCTION`: `userdata` is the unretained ``CurlEasyHandle``.
private func curlHeaderCallback(
    _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?
) -> Int {
    guard let userdata else { return 0 }
    let handle = Unmanaged<CurlEasyHandle>.fromOpaque(userdata).takeUnretainedValue()
    handle.receiveHeaderLine(UnsafeRawBufferPointer(start: buffer, count: size * count))
    return size * count
}
