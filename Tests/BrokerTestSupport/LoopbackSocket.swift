#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP connection to a port on 127.0.0.1 (or another loopback address), as a blocking
/// descriptor the caller owns.
package enum LoopbackSocket {
    /// Connects to `port` on `address`, with the socket's receive buffer set to
    /// `receiveBuffer` bytes first when given (a small one makes a client that does not read
    /// fill up quickly); `nil` when the connection fails.
    package static func connect(port: UInt16, address: String = "127.0.0.1", receiveBuffer: Int32? = nil) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        let host = address
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr(host)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { systemConnect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }
}

// The C function, by a name the method above does not shadow.
private let systemConnect = connect
