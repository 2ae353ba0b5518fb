import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// Each connection's HTTP/1.1 pipeline: Hummingbird's `HTTP1Channel`, plus SwiftNIO's
/// pipelining assistance and a ``ConnectionPolicy`` ahead of the conversion to HTTP types.
///
/// `HTTP1Channel` cannot serve here as it is: its handlers see requests only after the
/// HTTP version is gone, so an HTTP/1.0 request was answered and its connection held open
/// until the idle timeout (the client waits for the close that ends a 1.0 response); and a
/// pipelined request that arrived with a refused one was still answered.
struct CredentialHTTPChannel: HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    let responder: HTTPChannelHandler.Responder
    let idleTimeout: Duration
    let roster: ConnectionRoster

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let pipeline = channel.pipeline.syncOperations
            // Hummingbird's own decoder limits and settings; with pipelining assistance, the
            // next request is read only once the answer to this one is written, so the
            // policy can still drop it.
            let decoder = HTTP1Channel.Configuration.DecoderConfiguration()
            var limits = NIOHTTPDecoderLimitConfiguration()
            limits.maxHeaderFieldSize = decoder.maxHeaderFieldSize
            limits.maxHeaderListSize = decoder.maxHeaderListSize
            limits.maxHeaderFieldCount = decoder.maxHeaderFieldCount
            try pipeline.configureHTTPServerPipeline(
                withPipeliningAssistance: true,
                withErrorHandling: false,
                withOutboundHeaderValidation: false,
                withEncoderConfiguration: .init(),
                withDecoderLimitConfiguration: limits)
            try pipeline.addHandler(ConnectionPolicy(stallTimeout: idleTimeout))
            try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            try pipeline.addHandler(roster.handler())
            try pipeline.addHandler(HTTPConnectionStateHandler(idleTimeout: idleTimeout, logger: logger))
            return try NIOAsyncChannel(wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
        }
    }

    func handle(value: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: value, logger: logger)
    }
}

/// When a connection ends, seen where the HTTP version is still known.
///
/// - A request that does not keep its connection alive (HTTP/1.0 without
///   `Connection: keep-alive`, or `Connection: close`) is passed on with
///   `Connection: close`, so the server ends the connection once it has answered.
/// - An answer that says `Connection: close` (every refusal does) ends reading: nothing
///   after it reaches the responder, neither a request sent with it nor the parse error of
///   a body cut short, so a client without the token gets one answer per connection,
///   however many requests it sent at once. The server then ends the connection once the
///   answer is written.
/// - A request whose body does not parse gets the responder's answer alone (not also
///   Hummingbird's 400), then the connection ends.
/// - A request with a body (the SDKs send none) ends its connection once answered, the rest
///   of the body unread: sent a byte at a time, it would otherwise keep the connection busy
///   for good, past the idle timeout (each byte is a new part) and out of
///   ``ConnectionRoster``'s reach, and hold up a graceful shutdown.
/// - A connection whose answers the client does not read is closed once it has been unable
///   to take more output for `stallTimeout`: its answer would wait for room forever, with
///   no idle timeout running (a request is in progress), holding up a graceful shutdown
///   (`federate exec` would never exit after its command) and a place among the connections.
final class ConnectionPolicy: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// How long the connection may stay unable to take more output.
    private let stallTimeout: Duration
    /// Closes the connection when it has been unwritable for ``stallTimeout``.
    private var stalled: Scheduled<Void>?

    init(stallTimeout: Duration) {
        self.stallTimeout = stallTimeout
    }

    private var closing = false
    /// Whether the handlers after this one were told that input ended.
    private var toldInputEnded = false
    /// Whether a request was passed on and its answer is not written yet.
    private var answerPending = false
    /// A parse error (a malformed body) that came while ``answerPending``.
    private var heldParseError = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        guard case .head(var head) = unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        answerPending = true
        let hasBody = !head.headers["transfer-encoding"].isEmpty || head.headers["content-length"].contains { $0 != "0" }
        if !head.isKeepAlive || hasBody {
            head.headers.replaceOrAdd(name: "connection", value: "close")
        }
        context.fireChannelRead(wrapInboundOut(.head(head)))
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            stalled?.cancel()
            stalled = nil
        } else if stalled == nil {
            stalled = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(stallTimeout)) {
                context.close(promise: nil)
            }
        }
        context.fireChannelWritabilityChanged()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stalled?.cancel()
        stalled = nil
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard error is HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        // Hummingbird answers a parse error with a 400. During a request (its body, sent in
        // the same segment as its head, does not parse) that would be a second answer to it,
        // after the responder's: SwiftNIO's pipelining assistance stops a debug build on
        // that, and a release build sent both. The request's answer goes out alone, then
        // the connection ends.
        // A connection already closed (a request cut off when it closed: "stream ended at an
        // unexpected time") has nobody to answer; a 400 written then, during a graceful
        // shutdown, stopped a debug build in SwiftNIO's pipelining assistance.
        if closing || !context.channel.isActive { return }
        if answerPending {
            heldParseError = true
            return
        }
        context.fireErrorCaught(error)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            if toldInputEnded { return }
            toldInputEnded = true
        }
        context.fireUserInboundEventTriggered(event)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let part = unwrapOutboundIn(data)
        if case .end = part {
            answerPending = false
            if heldParseError && !closing {
                closing = true
                context.close(mode: .input, promise: nil)
            }
        }
        context.write(data, promise: promise)
        switch part {
        case .head(let head) where !closing:
            guard head.headers[canonicalForm: "connection"].contains(where: { $0.lowercased() == "close" }) else { return }
            closing = true
            // Nothing more is read from the socket; an unread body is dropped.
            context.close(mode: .input, promise: nil)
        case .end where closing && !toldInputEnded:
            // The answer is out: the server's read loop ends here and it closes the
            // connection. SwiftNIO's pipelining assistance would hold the socket's own end
            // of input back behind a request sent with this one, which is never answered.
            toldInputEnded = true
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        default:
            break
        }
    }
}
