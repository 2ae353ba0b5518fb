/// What the ``LoopbackHTTPServer`` does with one request: a normal answer, or one of the
/// failures a transport must survive (late, truncated, dropped, reset, dripping, huge).
///
/// A struct with static factories rather than a public enum, so new behaviours can be
/// added without breaking exhaustive switches in tests.
public struct ScriptedResponse: Sendable {
    enum Action: Sendable {
        /// A complete response with `Content-Length`.
        case respond(status: Int, headers: [(name: String, value: String)], body: [UInt8])
        /// Headers announcing `declaredLength` bytes, then `body` (shorter), then close.
        case truncate(status: Int, headers: [(name: String, value: String)], declaredLength: Int, body: [UInt8])
        /// Close the connection without answering.
        case drop
        /// Close with `SO_LINGER` 0, so the peer gets a TCP RST.
        case reset
        /// A complete response whose body goes out `chunkSize` bytes at a time, `interval` apart.
        case drip(status: Int, headers: [(name: String, value: String)], body: [UInt8], chunkSize: Int, interval: Duration)
        /// `byteCount` body bytes generated on the fly (never held in memory at once).
        case stream(status: Int, headers: [(name: String, value: String)], byteCount: Int, chunked: Bool)
    }

    var action: Action
    /// Waited (interruptibly, by ``LoopbackHTTPServer/stop()``) before acting.
    var delay: Duration = .zero
    /// Whether to close the connection after a complete response.
    var closesConnection = false

    init(_ action: Action) {
        self.action = action
    }

    // MARK: Normal answers

    /// A complete response on a kept-alive connection. `Content-Length` is added unless
    /// `headers` has one (or `Transfer-Encoding`).
    public static func respond(
        status: Int = 200, headers: [(name: String, value: String)] = [], body: [UInt8] = []
    ) -> ScriptedResponse {
        ScriptedResponse(.respond(status: status, headers: headers, body: body))
    }

    /// A complete response with a UTF-8 text body.
    public static func respond(
        status: Int = 200, headers: [(name: String, value: String)] = [], text: String
    ) -> ScriptedResponse {
        respond(status: status, headers: headers, body: Array(text.utf8))
    }

    /// A JSON response (`Content-Type: application/x-amz-json-1.1` unless given).
    public static func json(
        status: Int = 200, _ text: String, contentType: String = "application/x-amz-json-1.1"
    ) -> ScriptedResponse {
        respond(status: status, headers: [("Content-Type", contentType)], text: text)
    }

    // MARK: Failures

    /// Announces `declaredLength` bytes, sends only `body`, then closes the connection.
    public static func truncated(
        status: Int = 200, headers: [(name: String, value: String)] = [], declaredLength: Int, body: [UInt8]
    ) -> ScriptedResponse {
        precondition(declaredLength > body.count, "a truncated response must declare more than it sends")
        return ScriptedResponse(.truncate(status: status, headers: headers, declaredLength: declaredLength, body: body))
    }

    /// Closes the connection after reading the request, without any answer.
    public static let drop = ScriptedResponse(.drop)

    /// Resets the connection (TCP RST through `SO_LINGER` 0) after reading the request.
    public static let reset = ScriptedResponse(.reset)

    /// A complete response whose body is sent `chunkSize` bytes at a time, `interval` apart.
    public static func slowDrip(
        status: Int = 200, headers: [(name: String, value: String)] = [], body: [UInt8],
        chunkSize: Int = 1, interval: Duration
    ) -> ScriptedResponse {
        ScriptedResponse(.drip(status: status, headers: headers, body: body, chunkSize: max(1, chunkSize), interval: interval))
    }

    /// A body of `byteCount` bytes, generated while sending. With `chunked` the length is
    /// not announced (`Transfer-Encoding: chunked`), so only the client's running count
    /// can stop it; otherwise `Content-Length` announces it up front.
    public static func oversize(
        status: Int = 200, headers: [(name: String, value: String)] = [], byteCount: Int, chunked: Bool = false
    ) -> ScriptedResponse {
        ScriptedResponse(.stream(status: status, headers: headers, byteCount: byteCount, chunked: chunked))
    }

    // MARK: Modifiers

    /// The same response, after waiting `delay` (interrupted by ``LoopbackHTTPServer/stop()``).
    public func delayed(by delay: Duration) -> ScriptedResponse {
        var copy = self
        copy.delay = delay
        return copy
    }

    /// The same response with `Connection: close`, closing the connection after it.
    public func closingConnection() -> ScriptedResponse {
        var copy = self
        copy.closesConnection = true
        return copy
    }
}
