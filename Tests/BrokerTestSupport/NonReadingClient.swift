#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization

// The C functions, by names the methods below do not shadow.
private let systemSend = send
private let systemShutdown = shutdown

/// A connection with a small receive buffer that sends and never reads.
package final class NonReadingClient: Sendable {
    private let descriptor: Int32
    private let refused = Mutex(false)

    package init?(port: UInt16) {
        guard let fd = LoopbackSocket.connect(port: port, receiveBuffer: 4096) else { return nil }
        descriptor = fd
    }

    deinit { close(descriptor) }

    /// Sends `text`, blocking while the server takes nothing (unless not `waiting`); returns
    /// the bytes left unsent when the connection failed or, not `waiting`, was full (0: all
    /// sent).
    @discardableResult
    package func send(_ text: String, waiting: Bool = true) -> Int {
        var bytes = Array(text.utf8)[...]
        let flags = Int32(MSG_NOSIGNAL) | (waiting ? 0 : Int32(MSG_DONTWAIT))
        while !bytes.isEmpty {
            let count = bytes.withUnsafeBytes { systemSend(descriptor, $0.baseAddress, $0.count, flags) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes = bytes.dropFirst(count)
        }
        return bytes.count
    }

    /// Sends `text` again and again until the connection fails.
    package func sendUntilRefused(_ text: String) {
        while send(text) == 0 {}
        refused.withLock { $0 = true }
    }

    /// Whether ``sendUntilRefused(_:)`` saw the connection fail.
    package var wasRefused: Bool { refused.withLock { $0 } }

    /// Ends the connection from this side, which also ends a blocked ``send(_:)``.
    package func shutDown() {
        _ = systemShutdown(descriptor, Int32(SHUT_RDWR))
    }
}
