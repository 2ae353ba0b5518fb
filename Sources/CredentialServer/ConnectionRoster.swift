import HTTPTypes
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// The server's open connections, so that silent ones cannot crowd out the child.
///
/// Any local user can connect to the port without the token. One who opens connections and
/// sends nothing would fill the server's connection limit, and the child's next fetch would
/// wait in the kernel's queue until the idle timeout freed a place (10 s; the SDKs give up
/// after 2 s and 3 attempts). So a connection that arrives when ``limit`` are open closes
/// the one idle longest that has no request in progress: one that has not sent a request yet, or
/// a kept-alive one whose last request was answered (the child's own, after a fan-out of
/// more processes than the limit, which would otherwise refuse every new connection until
/// the idle timeout). The child's connections send their requests at once, and a refused
/// request closes its own connection, so what gets closed this way is a connection that
/// only held a place; a kept-alive client whose connection closes connects again.
final class ConnectionRoster: Sendable {
    private struct Entry {
        let channel: any Channel
        /// When it opened, or when its last answer was written.
        var idleSince: ContinuousClock.Instant
        var sentRequest: Bool
    }

    private struct State {
        var nextID: UInt64 = 0
        var open: [UInt64: Entry] = [:]
    }

    /// Connections kept open at once.
    let limit: Int
    private let state = Mutex(State())
    private let logger: Logger

    init(limit: Int, logger: Logger) {
        self.limit = limit
        self.logger = logger
    }

    /// Records `channel`; when that makes more than ``limit``, closes the connection with no
    /// request in progress that has been idle longest (this one, when every other has a
    /// request in progress). Returns `channel`'s place.
    func opened(_ channel: any Channel) -> UInt64 {
        let now = ContinuousClock.now
        let (id, evicted) = state.withLock { state -> (UInt64, (any Channel)?) in
            let id = state.nextID
            state.nextID += 1
            state.open[id] = Entry(channel: channel, idleSince: now, sentRequest: false)
            guard state.open.count > limit else { return (id, nil) }
            // The one idle longest: a kept-alive connection answered a moment ago may be about
            // to carry its client's next request.
            // A new connection is the youngest, so it goes only when nothing else can.
            let silent = state.open.filter { !$0.value.sentRequest }
            // Ties go to the older place, so the choice does not depend on dictionary order.
            guard let oldest = silent.min(by: { ($0.value.idleSince, $0.key) < ($1.value.idleSince, $1.key) })?.key else { return (id, nil) }
            return (id, state.open.removeValue(forKey: oldest)?.channel)
        }
        if let evicted {
            logger.debug("closed a connection with no request in progress, to make room")
            evicted.close(promise: nil)
        }
        return id
    }

    /// The connection at `id` sent (the head of) a request.
    func sentRequest(_ id: UInt64) {
        state.withLock { $0.open[id]?.sentRequest = true }
    }

    /// The answer on the connection at `id` was written: kept alive, it waits like a new one.
    func answered(_ id: UInt64) {
        let now = ContinuousClock.now
        state.withLock { state in
            state.open[id]?.sentRequest = false
            state.open[id]?.idleSince = now
        }
    }

    /// The connection at `id` closed.
    func closed(_ id: UInt64) {
        _ = state.withLock { $0.open.removeValue(forKey: id) }
    }

    /// The places of the connections recorded, and whether each has a request in progress
    /// (for tests).
    var recorded: [UInt64: Bool] {
        state.withLock { $0.open.mapValues(\.sentRequest) }
    }

    /// A handler for each connection's pipeline, after the conversion to HTTP types: a
    /// request part it passes on marks the connection as one with a request in progress, and
    /// the end of an answer as one without.
    func handler() -> any RemovableChannelHandler {
        Handler(roster: self)
    }

    private final class Handler: ChannelDuplexHandler, RemovableChannelHandler {
        // Parts pass through unread; only their arrival matters.
        typealias InboundIn = NIOAny
        typealias InboundOut = NIOAny
        typealias OutboundIn = HTTPResponsePart
        typealias OutboundOut = HTTPResponsePart

        private let roster: ConnectionRoster
        private var id: UInt64?
        private var marked = false

        init(roster: ConnectionRoster) {
            self.roster = roster
        }

        func handlerAdded(context: ChannelHandlerContext) {
            id = roster.opened(context.channel)
        }

        func handlerRemoved(context: ChannelHandlerContext) {
            if let id { roster.closed(id) }
            id = nil
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if !marked, let id {
                marked = true
                roster.sentRequest(id)
            }
            context.fireChannelRead(data)
        }

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            if case .end = unwrapOutboundIn(data), let id {
                marked = false
                roster.answered(id)
            }
            context.write(data, promise: promise)
        }
    }
}
