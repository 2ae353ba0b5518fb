#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One accepted connection of a ``LoopbackHTTPServer``: reads requests one after the
/// other (keep-alive), records each, and performs the scripted response.
///
/// Lives and dies on its own thread, so it is not `Sendable`. Every blocking wait polls
/// the server's stop signal too, so ``LoopbackHTTPServer/stop()`` interrupts it.
final class LoopbackConnection {
    private let server: LoopbackServerCore
    private let fd: Int32
    private let connectionID: Int
    /// Bytes received and not yet consumed (pipelined requests stay here).
    private var buffer: [UInt8] = []
    private var isClosed = false

    /// The largest request head accepted; a larger one closes the connection.
    private static let maxHeadBytes = 1 << 20

    init(server: LoopbackServerCore, fd: Int32, connectionID: Int) {
        self.server = server
        self.fd = fd
        self.connectionID = connectionID
    }

    func serve() {
        defer { close(reset: false) }
        while let request = readRequest() {
            let recorded = server.record(request)
            let response = server.handler(recorded)
            guard perform(response, for: recorded) else { return }
        }
    }

    // MARK: Reading

    private func readRequest() -> RecordedRequest? {
        // The head.
        var searchFrom = 0
        var headEnd: Int
        while true {
            if let end = Self.find([13, 10, 13, 10], in: buffer, from: searchFrom) {
                headEnd = end
                break
            }
            guard buffer.count <= Self.maxHeadBytes else { return nil }
            searchFrom = max(0, buffer.count - 3)
            guard receiveMore() else { return nil }
            // Not HTTP at all (e.g. a TLS ClientHello to this plain port): answer 400
            // and close at once, as a real server does, instead of waiting forever for
            // a blank line that never comes.
            if let first = buffer.first, !Self.mayStartRequest(first) {
                _ = sendAll(Self.head(status: 400, headers: [], contentLength: 0, closes: true))
                return nil
            }
        }
        var lines = buffer[..<headEnd].split(separator: 10, omittingEmptySubsequences: false).map { line in
            String(decoding: line.last == 13 ? line.dropLast() : line, as: UTF8.self)
        }
        buffer.removeSubrange(..<(headEnd + 4))
        while lines.first?.isEmpty == true { lines.removeFirst() }
        guard let requestLine = lines.first else { return nil }
        let parts = requestLine.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3 else { return nil }

        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((
                name: String(line[..<colon]),
                value: String(line[line.index(after: colon)...]).trimmingWhitespace))
        }
        var request = RecordedRequest(
            method: String(parts[0]), target: String(parts[1]), version: String(parts[2]),
            headers: headers, connectionID: connectionID)

        // The body.
        let chunked = request.header("Transfer-Encoding")?.lowercased().contains("chunked") == true
        let contentLength = chunked ? 0 : Int(request.header("Content-Length") ?? "0") ?? -1
        guard contentLength >= 0 else { return nil }
        if request.header("Expect")?.lowercased() == "100-continue",
           chunked || buffer.count < contentLength {
            guard sendAll(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) else { return nil }
        }
        if chunked {
            while true {
                if let (body, consumed) = Self.decodeChunked(buffer) {
                    request.body = body
                    buffer.removeSubrange(..<consumed)
                    break
                }
                guard receiveMore() else { return nil }
            }
        } else {
            while buffer.count < contentLength {
                guard receiveMore() else { return nil }
            }
            request.body = Array(buffer[..<contentLength])
            buffer.removeSubrange(..<contentLength)
        }
        return request
    }

    /// Waits for and appends more bytes; `false` on EOF, error or stop.
    private func receiveMore() -> Bool {
        var fds = [
            pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
            pollfd(fd: server.stopSignalFD, events: Int16(POLLIN), revents: 0),
        ]
        while true {
            let ready = poll(&fds, 2, -1)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0, fds[1].revents == 0 else { return false }
            break
        }
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return false }
        buffer.append(contentsOf: chunk[..<count])
        return true
    }

    // MARK: Responding

    /// Performs `response`; returns whether the connection stays open for another request.
    private func perform(_ response: ScriptedResponse, for request: RecordedRequest) -> Bool {
        if response.delay > .zero {
            guard wait(response.delay) else { return false }
        }
        let isHead = request.method == "HEAD"
        let clientCloses = request.header("Connection")?.lowercased() == "close"
            || (request.version == "HTTP/1.0" && request.header("Connection")?.lowercased() != "keep-alive")
        let closes = response.closesConnection || clientCloses

        switch response.action {
        case .respond(let status, let headers, let body):
            let head = Self.head(status: status, headers: headers, contentLength: body.count, closes: closes)
            return sendAll(head + (isHead ? [] : body)) && !closes

        case .truncate(let status, let headers, let declaredLength, let body):
            let head = Self.head(status: status, headers: headers, contentLength: declaredLength, closes: true)
            _ = sendAll(head + body)
            close(reset: false)
            return false

        case .drop:
            close(reset: false)
            return false

        case .reset:
            close(reset: true)
            return false

        case .drip(let status, let headers, let body, let chunkSize, let interval):
            let head = Self.head(status: status, headers: headers, contentLength: body.count, closes: closes)
            guard sendAll(head) else { return false }
            var offset = 0
            while offset < body.count, !isHead {
                guard wait(interval) else { return false }
                let end = min(body.count, offset + chunkSize)
                guard sendAll(Array(body[offset..<end])) else { return false }
                offset = end
            }
            return !closes

        case .stream(let status, let headers, let byteCount, let chunked):
            var allHeaders = headers
            if chunked { allHeaders.append(("Transfer-Encoding", "chunked")) }
            let head = Self.head(
                status: status, headers: allHeaders, contentLength: chunked ? nil : byteCount, closes: closes)
            guard sendAll(head) else { return false }
            guard !isHead else { return !closes }
            let block = [UInt8](repeating: UInt8(ascii: "x"), count: 16 * 1024)
            var remaining = byteCount
            while remaining > 0 {
                let count = min(remaining, block.count)
                let piece = chunked
                    ? Array(String(count, radix: 16).utf8) + [13, 10] + block[..<count] + [13, 10]
                    : Array(block[..<count])
                // The client hanging up once it has seen enough is the expected outcome.
                guard sendAll(piece) else { return false }
                remaining -= count
            }
            if chunked { guard sendAll(Array("0\r\n\r\n".utf8)) else { return false } }
            return !closes
        }
    }

    /// The status line and header block. `Content-Length` is added when `contentLength`
    /// is given and `headers` sets neither it nor `Transfer-Encoding`.
    private static func head(
        status: Int, headers: [(name: String, value: String)], contentLength: Int?, closes: Bool
    ) -> [UInt8] {
        var text = "HTTP/1.1 \(status) \(reasonPhrase(status))\r\n"
        var framed = false
        for (name, value) in headers {
            let lowered = name.lowercased()
            framed = framed || lowered == "content-length" || lowered == "transfer-encoding"
            text += "\(name): \(value)\r\n"
        }
        if !framed, let contentLength { text += "Content-Length: \(contentLength)\r\n" }
        if closes { text += "Connection: close\r\n" }
        text += "\r\n"
        return Array(text.utf8)
    }

    private static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 201: "Created"
        case 204: "No Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 304: "Not Modified"
        case 307: "Temporary Redirect"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        default: "Status"
        }
    }

    // MARK: Socket helpers

    /// Sends everything, or returns `false` when the peer is gone or the server stops.
    private func sendAll(_ bytes: [UInt8]) -> Bool {
        guard !isClosed else { return false }
        return bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let sent = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if sent < 0 && errno == EINTR { continue }
                guard sent > 0 else { return false }
                offset += sent
            }
            return true
        }
    }

    /// Sleeps for `duration` unless the server stops first; `false` when it stopped.
    private func wait(_ duration: Duration) -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + duration
        var fds = [pollfd(fd: server.stopSignalFD, events: Int16(POLLIN), revents: 0)]
        while true {
            let remaining = clock.now.duration(to: deadline)
            guard remaining > .zero else { return true }
            let (seconds, attoseconds) = remaining.components
            let milliseconds = min(Int64(Int32.max), seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
            if poll(&fds, 1, Int32(milliseconds)) > 0 { return false }
        }
    }

    private func close(reset: Bool) {
        guard !isClosed else { return }
        isClosed = true
        server.closeConnection(fd, reset: reset)
    }

    // MARK: Parsing helpers

    /// A request starts with a method token (or stray line breaks before it).
    private static func mayStartRequest(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || byte == 13 || byte == 10
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        var index = start
        while index <= haystack.count - needle.count {
            if haystack[index] == needle[0], Array(haystack[index..<(index + needle.count)]) == needle {
                return index
            }
            index += 1
        }
        return nil
    }

    /// Decodes a complete chunked body at the start of `bytes`, returning it and how many
    /// bytes it took (trailers included); `nil` while incomplete.
    private static func decodeChunked(_ bytes: [UInt8]) -> (body: [UInt8], consumed: Int)? {
        var body: [UInt8] = []
        var offset = 0
        while true {
            guard let lineEnd = find([13, 10], in: bytes, from: offset) else { return nil }
            let sizeText = String(decoding: bytes[offset..<lineEnd], as: UTF8.self)
                .prefix { $0 != ";" }.trimmingWhitespace
            guard let size = Int(sizeText, radix: 16), size >= 0 else { return nil }
            offset = lineEnd + 2
            if size == 0 {
                // Trailers, if any, end with an empty line.
                while true {
                    guard let end = find([13, 10], in: bytes, from: offset) else { return nil }
                    let isEmpty = end == offset
                    offset = end + 2
                    if isEmpty { return (body, offset) }
                }
            }
            guard bytes.count >= offset + size + 2 else { return nil }
            body.append(contentsOf: bytes[offset..<(offset + size)])
            offset += size + 2
        }
    }
}

@available(*, unavailable, message: "a connection is confined to its own thread")
extension LoopbackConnection: Sendable {}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs.
    fileprivate var trimmingWhitespace: String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let start = firstIndex(where: { !isSpace($0) }), let end = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[start...end])
    }
}
