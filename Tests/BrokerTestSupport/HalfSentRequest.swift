#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A raw loopback connection that sends the start of a request and never the rest (what a
/// client holding connections open does), or whatever else a test gives it.
package final class HalfSentRequest: Sendable {
    package enum Outcome: Sendable {
        /// The server closed the connection, this long after it was opened.
        case closed(after: Duration)
        case stillOpen
        /// The server sent bytes (it must not: the request was never complete).
        case answered(String)
    }

    private let descriptor: Int32
    private let opened = ContinuousClock.now

    package init?(port: UInt16, sending text: String = "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\n") {
        guard let fd = LoopbackSocket.connect(port: port) else { return nil }
        let start = Array(text.utf8)
        guard send(fd, start, start.count, 0) == start.count else {
            close(fd)
            return nil
        }
        descriptor = fd
    }

    deinit { close(descriptor) }

    /// Whether the server has closed the connection, without waiting.
    package var isClosedByServer: Bool {
        var byte: UInt8 = 0
        let count = recv(descriptor, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK))
        return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }

    /// Whether the server has closed the connection once what it sent is read, without
    /// waiting (its answers are read and dropped).
    package var isClosedAfterItsAnswers: Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count > 0 { continue }
            return count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)
        }
    }

    /// Blocks until the server closes the connection, sends something, or `limit` passes.
    package func waitForClose(within limit: Duration) -> Outcome {
        let deadline = ContinuousClock.now + limit
        var buffer = [UInt8](repeating: 0, count: 512)
        while ContinuousClock.now < deadline {
            var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count == 0 { return .closed(after: ContinuousClock.now - opened) }
            if count > 0 { return .answered(String(decoding: buffer[..<count], as: UTF8.self)) }
            if errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                return .closed(after: ContinuousClock.now - opened)
            }
        }
        return .stillOpen
    }
}

extension HalfSentRequest {
    /// Reads what the server sends until it closes the connection or `limit` passes: the
    /// text, and whether it closed.
    package func readAll(within limit: Duration) -> (text: String, closed: Bool) {
        var text = ""
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            switch waitForClose(within: deadline - ContinuousClock.now) {
            case .answered(let part): text += part
            case .closed: return (text, true)
            case .stillOpen: return (text, false)
            }
        }
        return (text, false)
    }
}
