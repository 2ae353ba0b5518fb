#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization

/// A scriptable HTTP/1.1 server on `127.0.0.1` and an ephemeral port, for tests that
/// must cross a real socket (the libcurl transport, the CLI) without any external
/// process.
///
/// Plain POSIX sockets and one thread per connection: simple enough to trust in tests,
/// and it serves as many concurrent keep-alive connections as the client opens. Each
/// request is recorded, then answered with whatever the handler returns, including the
/// failures a transport must survive (see ``ScriptedResponse``).
///
/// ```swift
/// let server = try LoopbackHTTPServer { request in
///     request.path == "/slow" ? .respond(text: "late").delayed(by: .seconds(5)) : .json("{}")
/// }
/// defer { server.stop() }
/// ```
///
/// ``stop()`` (or `deinit`) interrupts waits, closes every socket and joins every thread.
public final class LoopbackHTTPServer: Sendable {
    /// Why the server could not start.
    public struct StartError: Error, Sendable, CustomStringConvertible {
        /// The call that failed, e.g. `bind`.
        public var operation: String
        /// `errno` after the call.
        public var code: Int32

        public var description: String {
            "LoopbackHTTPServer: \(operation) failed: \(String(cString: strerror(code))) (errno \(code))"
        }
    }

    /// The port the server listens on (chosen by the kernel).
    public let port: Int

    private let core: LoopbackServerCore

    /// Starts a server that answers each request with `handler`'s response.
    ///
    /// `handler` runs on the connection's thread, possibly on several threads at once.
    public init(handler: @escaping @Sendable (RecordedRequest) -> ScriptedResponse) throws {
        core = try LoopbackServerCore(handler: handler)
        port = core.port
    }

    /// Starts a server that answers requests with `script`, in order, and with
    /// `whenExhausted` once the script has run out.
    public convenience init(
        script: [ScriptedResponse],
        whenExhausted: ScriptedResponse = .respond(status: 500, text: "LoopbackHTTPServer: script exhausted")
    ) throws {
        let queue = ScriptQueue(script)
        try self.init { _ in queue.next() ?? whenExhausted }
    }

    deinit {
        core.stop()
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// `baseURL` followed by `path` (which should start with `/`).
    public func url(_ path: String = "/") -> String { baseURL + path }

    /// Every request received so far, in arrival order.
    public var requests: [RecordedRequest] { core.recordedRequests }

    /// How many requests have been received.
    public var requestCount: Int { core.counts.requests }

    /// How many connections have been accepted; fewer than ``requestCount`` means reuse.
    public var connectionCount: Int { core.counts.connections }

    /// Stops accepting, interrupts delays, closes every connection and joins every
    /// thread. Idempotent; also run by `deinit`.
    public func stop() {
        core.stop()
    }
}

/// Hands out a fixed list of responses in order to concurrent callers.
private final class ScriptQueue: Sendable {
    private let remaining: Mutex<ArraySlice<ScriptedResponse>>

    init(_ script: [ScriptedResponse]) {
        remaining = Mutex(script[...])
    }

    func next() -> ScriptedResponse? {
        remaining.withLock { $0.popFirst() }
    }
}

/// The server's sockets, threads and records, shared by all its threads.
///
/// Kept apart from ``LoopbackHTTPServer`` so that the threads do not keep the public
/// object alive: dropping the last reference to it stops everything.
final class LoopbackServerCore: Sendable {
    let port: Int
    let handler: @Sendable (RecordedRequest) -> ScriptedResponse
    private let listenFD: Int32
    /// Never drained: once ``stop()`` writes to it, every `poll` that includes
    /// `stopSignalFD` returns at once, forever.
    let stopSignalFD: Int32
    private let stopTriggerFD: Int32
    private let state = Mutex(State())

    private struct State {
        var stopped = false
        var acceptThread: pthread_t?
        var connectionThreads: Set<pthread_t> = []
        var finishedThreads: [pthread_t] = []
        var openConnections: Set<Int32> = []
        var requests: [RecordedRequest] = []
        var connectionCount = 0
    }

    init(handler: @escaping @Sendable (RecordedRequest) -> ScriptedResponse) throws {
        self.handler = handler
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw LoopbackHTTPServer.StartError(operation: "socket", code: errno) }
        var reuse: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))

        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(fd, generic, length) == 0 && getsockname(fd, generic, &length) == 0
            }
        }
        // A deep backlog: tests open 64+ connections at the same instant.
        guard bound, listen(fd, 1024) == 0 else {
            let code = errno
            close(fd)
            throw LoopbackHTTPServer.StartError(operation: "bind/listen", code: code)
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        listenFD = fd

        var pipeFDs: [Int32] = [-1, -1]
        guard pipe(&pipeFDs) == 0 else {
            let code = errno
            close(fd)
            throw LoopbackHTTPServer.StartError(operation: "pipe", code: code)
        }
        // pipe2/accept4 are GNU extensions Swift's Glibc module does not export.
        _ = fcntl(pipeFDs[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(pipeFDs[1], F_SETFD, FD_CLOEXEC)
        stopSignalFD = pipeFDs[0]
        stopTriggerFD = pipeFDs[1]

        do {
            let thread = try spawnThread { [self] in acceptLoop() }
            state.withLock { $0.acceptThread = thread }
        } catch {
            close(fd)
            close(pipeFDs[0])
            close(pipeFDs[1])
            throw error
        }
    }

    var recordedRequests: [RecordedRequest] {
        state.withLock { $0.requests }
    }

    var counts: (requests: Int, connections: Int) {
        state.withLock { ($0.requests.count, $0.connectionCount) }
    }

    func stop() {
        let acceptThread: pthread_t? = state.withLock { state in
            guard !state.stopped else { return nil }
            state.stopped = true
            defer { state.acceptThread = nil }
            return state.acceptThread
        }
        guard let acceptThread else { return }
        var byte: UInt8 = 1
        _ = write(stopTriggerFD, &byte, 1)
        // After the accept thread is gone no connection thread can be added.
        pthread_join(acceptThread, nil)

        let threads: [pthread_t] = state.withLock { state in
            // Unblocks any thread stuck in send/recv; the fds stay open (each thread
            // closes its own), so no fd number can be reused under our feet.
            for fd in state.openConnections { _ = shutdown(fd, Int32(SHUT_RDWR)) }
            defer {
                state.connectionThreads.removeAll()
                state.finishedThreads.removeAll()
            }
            return Array(state.connectionThreads)
        }
        for thread in threads { pthread_join(thread, nil) }
        close(listenFD)
        close(stopSignalFD)
        close(stopTriggerFD)
    }

    /// Records `request`, numbering it; returns the numbered copy.
    func record(_ request: RecordedRequest) -> RecordedRequest {
        state.withLock { state in
            var numbered = request
            numbered.sequenceNumber = state.requests.count + 1
            state.requests.append(numbered)
            return numbered
        }
    }

    /// Unregisters and closes a connection's socket; with `reset`, the peer gets a RST.
    func closeConnection(_ fd: Int32, reset: Bool) {
        if reset {
            var linger = linger(l_onoff: 1, l_linger: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size))
        }
        // Unregister before closing, under the lock, so stop() never shuts down a
        // number the kernel has already handed to someone else.
        state.withLock { _ = $0.openConnections.remove(fd) }
        close(fd)
    }

    private func acceptLoop() {
        while true {
            reapFinishedThreads()
            var fds = [
                pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0),
                pollfd(fd: stopSignalFD, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, -1)
            if ready < 0 { if errno == EINTR { continue } else { return } }
            if fds[1].revents != 0 { return }
            guard fds[0].revents != 0 else { continue }

            let fd = accept(listenFD, nil, nil)
            guard fd >= 0 else {
                // EMFILE and friends: back off briefly instead of spinning.
                if errno != EINTR && errno != EAGAIN && errno != ECONNABORTED { usleep(10_000) }
                continue
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            var noDelay: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))

            let connectionID: Int? = state.withLock { state in
                guard !state.stopped else { return nil }
                state.connectionCount += 1
                state.openConnections.insert(fd)
                return state.connectionCount
            }
            guard let connectionID else {
                close(fd)
                return
            }
            do {
                // The new thread registers itself as finished only after this insert,
                // because it must take the same lock first.
                try state.withLock { state in
                    let thread = try spawnThread { [self] in
                        LoopbackConnection(server: self, fd: fd, connectionID: connectionID).serve()
                        markFinished(pthread_self())
                    }
                    state.connectionThreads.insert(thread)
                }
            } catch {
                closeConnection(fd, reset: true)
            }
        }
    }

    private func markFinished(_ thread: pthread_t) {
        state.withLock { state in
            if !state.stopped { state.finishedThreads.append(thread) }
        }
    }

    /// Joins connection threads that have ended, so a long test does not pile them up.
    private func reapFinishedThreads() {
        let finished: [pthread_t] = state.withLock { state in
            defer { state.finishedThreads.removeAll() }
            for thread in state.finishedThreads { state.connectionThreads.remove(thread) }
            return state.finishedThreads
        }
        for thread in finished { pthread_join(thread, nil) }
    }
}

/// Starts a joinable thread running `body`.
private func spawnThread(_ body: @escaping @Sendable () -> Void) throws -> pthread_t {
    final class Box: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let box = Unmanaged.passRetained(Box(body))
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { argument in
        Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue().body()
        return nil
    }, box.toOpaque())
    guard rc == 0 else {
        box.release()
        throw LoopbackHTTPServer.StartError(operation: "pthread_create", code: rc)
    }
    return thread
}
