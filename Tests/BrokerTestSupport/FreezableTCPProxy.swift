import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A loopback TCP proxy to a local port whose connections can be frozen: a frozen connection
/// stays open but carries nothing more either way, as one through a NAT or firewall that
/// silently dropped it would. Connections made after a freeze are carried normally.
///
/// A proxy in front of PostgreSQL can also drop the server's notifications while carrying
/// everything else, as a connection whose `LISTEN` no longer works would.
package final class FreezableTCPProxy: Sendable {
    /// The proxy's port on 127.0.0.1.
    package let port: UInt16
    private let listener: Int32
    private struct State {
        var targetPort: UInt16
        var nextId = 0
        var frozenUpTo = -1
        var stopped = false
        var descriptors: [Int32] = []
        var dropsNotifications = false
        /// How long a new connection waits before anything is carried (a slow link's connect).
        var connectionDelay: Duration = .zero
        /// Bytes whose appearance in what a client sends freezes its connection (once).
        var holdPattern: [UInt8]?
        /// Connections frozen by ``holdPattern``.
        var held: Set<Int> = []
        /// The connections the last ``thaw()`` carried on.
        var thawed: Set<Int> = []
        /// How many of each connection's two directions have ended.
        var endedDirections: [Int: Int] = [:]
    }
    private let state: Mutex<State>
    private let framesPostgresMessages: Bool
    private let carriedFromTarget = Atomic<Int>(0)
    private let carriedAfterThaw = Atomic<Int>(0)

    /// The bytes carried so far from the target to clients, over every connection.
    package var bytesFromTarget: Int { carriedFromTarget.load(ordering: .acquiring) }
    /// The bytes carried from the target since ``thaw()`` on the connections it thawed.
    package var bytesFromThawedConnections: Int { carriedAfterThaw.load(ordering: .acquiring) }
    /// Whether the last ``thaw()`` carried on at least one connection and every one of them
    /// has ended both ways: what they held back has reached the target, and the target has
    /// done with them. (False when it carried none: nothing held back was delivered.)
    package var thawedConnectionsEnded: Bool {
        state.withLock { state in
            !state.thawed.isEmpty && state.thawed.allSatisfy { state.endedDirections[$0, default: 0] == 2 }
        }
    }
    /// How many connections ``freeze(whenAClientSends:)`` holds now.
    package var heldConnections: Int { state.withLock { $0.held.count } }
    /// How many connections the proxy has carried to the target so far.
    package var connectionsCarried: Int { state.withLock { $0.nextId } }

    /// - Parameter postgres: Whether the target is PostgreSQL, whose messages to the client
    ///   the proxy then frames (so that ``dropNotifications(_:)`` works); the client must not
    ///   ask for TLS.
    package init(targetPort: UInt16, postgres: Bool = false) throws {
        self.state = Mutex(State(targetPort: targetPort))
        self.framesPostgresMessages = postgres
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EIO) }
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, Glibc.listen(descriptor, 64) == 0 else {
            close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        listener = descriptor
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    /// Freezes every connection open now.
    package func freezeExisting() {
        state.withLock { $0.frozenUpTo = $0.nextId - 1 }
    }

    /// Carries every frozen connection again, with what it held back, as a path that healed
    /// does: bytes a client sent while frozen reach the server now, even on a connection the
    /// client has closed since.
    package func thaw() {
        state.withLock {
            $0.thawed = $0.held.union($0.frozenUpTo >= 0 ? Set(0...$0.frozenUpTo) : [])
            $0.frozenUpTo = -1
            $0.held = []
            // A pattern no client sent must not freeze a later, unrelated connection.
            $0.holdPattern = nil
        }
    }

    /// Freezes the next connection whose client sends `text` (in one read) just before it
    /// carries that text, as a path that starts dropping packets at that moment would;
    /// ``thaw()`` carries it on.
    package func freeze(whenAClientSends text: String) {
        precondition(!text.isEmpty, "an empty pattern would hold every connection")
        state.withLock { $0.holdPattern = Array(text.utf8) }
    }

    /// Holds each connection made from now on for `delay` before carrying anything, as a
    /// slow link's TCP and TLS set-up would (`.zero`: none).
    package func delayNewConnections(by delay: Duration) {
        state.withLock { $0.connectionDelay = delay }
    }

    /// Drops (or, with `false`, carries again) the server's `NotificationResponse` messages on
    /// every connection, open or made later; requires a proxy made with `postgres: true`.
    package func dropNotifications(_ drop: Bool) {
        precondition(framesPostgresMessages, "a proxy that does not frame PostgreSQL's messages cannot drop notifications")
        state.withLock { $0.dropsNotifications = drop }
    }

    /// Sends new connections to `port` and ends every open one (both ways), as a failover
    /// that moved the address does.
    package func retarget(to port: UInt16) {
        // Under the lock: a connection that ends meanwhile closes its descriptors, whose
        // numbers the process may then give to another socket.
        state.withLock { state in
            state.targetPort = port
            for descriptor in state.descriptors { shutdown(descriptor, Int32(SHUT_RDWR)) }
        }
    }

    /// Stops accepting and closes every connection.
    package func stop() {
        let first = state.withLock { state in
            defer { state.stopped = true }
            for descriptor in state.descriptors { shutdown(descriptor, Int32(SHUT_RDWR)) }
            return !state.stopped
        }
        guard first else { return }
        // Only shut down here: the accept loop closes it once `accept` fails, so it never
        // accepts on a number the process gave to another socket meanwhile.
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else {
                if errno == EINTR || errno == ECONNABORTED { continue }
                close(listener)
                return
            }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: state.withLock { $0.targetPort })
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(client)
                close(server)
                continue
            }
            let id = state.withLock { state -> Int? in
                guard !state.stopped else { return nil }
                state.descriptors += [client, server]
                defer { state.nextId += 1 }
                return state.nextId
            }
            guard let id else {
                close(client)
                close(server)
                return
            }
            let delay = state.withLock { $0.connectionDelay }
            Thread { [self] in
                if delay > .zero { Thread.sleep(forTimeInterval: Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18) }
                Thread { [self] in pump(from: client, to: server, id: id, framing: false, counted: false) }.start()
                pump(from: server, to: client, id: id, framing: framesPostgresMessages, counted: true)
            }.start()
        }
    }

    /// Whether `bytes`, from a client, hold the pattern of ``freeze(whenAClientSends:)``;
    /// if so, freezes connection `id` and forgets the pattern.
    private func holds(_ bytes: ArraySlice<UInt8>, on id: Int) -> Bool {
        state.withLock { state in
            guard let pattern = state.holdPattern, bytes.count >= pattern.count,
                  bytes.indices.dropLast(pattern.count - 1).contains(where: { bytes[$0..<($0 + pattern.count)].elementsEqual(pattern) })
            else { return false }
            state.holdPattern = nil
            state.held.insert(id)
            return true
        }
    }

    private func pump(from source: Int32, to destination: Int32, id: Int, framing: Bool, counted: Bool) {
        defer {
            // The second direction to end closes the connection's two descriptors.
            state.withLock { state in
                state.endedDirections[id, default: 0] += 1
                guard state.endedDirections[id] == 2 else { return }
                state.descriptors.removeAll { $0 == source || $0 == destination }
                close(source)
                close(destination)
            }
        }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var framer = PostgresMessageFramer()
        while true {
            let (frozen, stopped) = state.withLock { ($0.frozenUpTo >= id, $0.stopped) }
            if stopped { return }
            if frozen {
                usleep(50_000)
                continue
            }
            var request = pollfd(fd: source, events: Int16(POLLIN), revents: 0)
            guard poll(&request, 1, 50) > 0 else { continue }
            if state.withLock({ $0.frozenUpTo >= id }) { continue }
            let count = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
            if count <= 0 {
                shutdown(destination, Int32(SHUT_WR))
                return
            }
            if counted {
                carriedFromTarget.add(count, ordering: .releasing)
                if state.withLock({ $0.thawed.contains(id) }) { carriedAfterThaw.add(count, ordering: .releasing) }
            }
            if !counted && holds(buffer[0..<count], on: id) {
                while state.withLock({ $0.held.contains(id) && !$0.stopped }) { usleep(20_000) }
                // Stopped while held (a test that failed midway): what it held goes nowhere.
                if state.withLock({ $0.stopped }) { return }
            }
            let outgoing = framing
                ? framer.forward(buffer[0..<count], droppingNotifications: state.withLock { $0.dropsNotifications })
                : Array(buffer[0..<count])
            var offset = 0
            while offset < outgoing.count {
                // Not `write`: a peer gone since (a client that gave up) must not SIGPIPE the tests.
                let written = outgoing[offset...].withUnsafeBytes { send(destination, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if written <= 0 { return }
                offset += written
            }
        }
    }
}

/// Splits a PostgreSQL server's byte stream (no TLS) into its messages: a type byte, then a
/// big-endian length that counts itself and the body.
private struct PostgresMessageFramer {
    private var pending: [UInt8] = []

    /// The whole messages among what was held back and `bytes`, without notifications when
    /// asked; keeps an incomplete last message for the next call.
    mutating func forward(_ bytes: ArraySlice<UInt8>, droppingNotifications drop: Bool) -> [UInt8] {
        pending += bytes
        var outgoing: [UInt8] = []
        var start = 0
        while pending.count - start >= 5 {
            let length = pending[start + 1..<start + 5].reduce(0) { $0 << 8 | Int($1) }
            let end = start + 1 + length
            guard end <= pending.count else { break }
            if !(drop && pending[start] == UInt8(ascii: "A")) { outgoing += pending[start..<end] }
            start = end
        }
        pending.removeFirst(start)
        return outgoing
    }
}
