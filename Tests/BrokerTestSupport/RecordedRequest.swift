/// One request as the ``LoopbackHTTPServer`` received it, for assertions.
public struct RecordedRequest: Sendable {
    /// The method, e.g. `POST`.
    public var method: String
    /// The request target as sent, path plus query, e.g. `/token?x=1`.
    public var target: String
    /// The HTTP version from the request line, e.g. `HTTP/1.1`.
    public var version: String
    /// Header fields in the order received, names as sent.
    public var headers: [(name: String, value: String)]
    /// The body, de-chunked when it was sent chunked.
    public var body: [UInt8]
    /// Which accepted connection carried it (1 for the first), to observe reuse.
    public var connectionID: Int
    /// Its position among all requests the server received (1 for the first).
    public var sequenceNumber: Int

    public init(
        method: String,
        target: String,
        version: String = "HTTP/1.1",
        headers: [(name: String, value: String)] = [],
        body: [UInt8] = [],
        connectionID: Int = 0,
        sequenceNumber: Int = 0
    ) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.body = body
        self.connectionID = connectionID
        self.sequenceNumber = sequenceNumber
    }

    /// The target without its query.
    public var path: String {
        String(target.prefix { $0 != "?" })
    }

    /// The body decoded as UTF-8 (invalid bytes replaced).
    public var bodyText: String {
        String(decoding: body, as: UTF8.self)
    }

    /// The value of the first header named `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.name.lowercased() == lowered }?.value
    }

    /// All values of headers named `name` (case-insensitive), in order.
    public func headerValues(_ name: String) -> [String] {
        let lowered = name.lowercased()
        return headers.filter { $0.name.lowercased() == lowered }.map(\.value)
    }
}
