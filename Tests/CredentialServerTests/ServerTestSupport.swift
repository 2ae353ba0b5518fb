import BrokerTestSupport
@testable import CredentialServer
@testable import Federation
import Foundation
import Logging
import SecureStorage
import XCTest
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A pool ID in `us-east-1`.
let testPoolId = "us-east-1:11111111-2222-3333-4444-555555555555"
/// An endpoint no test reaches: the transport is the fake.
let testEndpoint = "https://cognito-identity.test.invalid/"

extension CredentialServerError: CodedError {}

/// A federating client over `keystore`, talking to `fake`, on the real clock.
func federatingClient(_ fake: FakeCognito, keystore: any Keystore, margin: Duration = .seconds(120)) throws -> FederationClient {
    var configuration = FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint)
    configuration.expiryMargin = margin
    return try FederationClient(
        configuration: configuration, transport: fake.transport, keystore: keystore, environment: [:],
        now: { Date() }, logger: nil)
}

/// One answer from the credential server.
struct Answer {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: String

    var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]) ?? [:]
    }

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// A running server and the task that runs it.
final class RunningServer: Sendable {
    let server: CredentialServer
    let task: Task<Void, any Error>

    init(_ server: CredentialServer) {
        self.server = server
        task = Task { try await server.run() }
    }

    /// GET (or `method`) `path` with `authorization` (the server's token by default; `nil` for none).
    func request(
        _ path: String, method: String = "GET", authorization: String?? = .some(nil)
    ) async throws -> Answer {
        let base = try await server.baseURL()
        var headers: [(name: String, value: String)] = []
        switch authorization {
        case .some(.some(let value)): headers.append(("Authorization", value))
        case .some(.none): headers.append(("Authorization", server.authorizationToken.value))
        case .none: break
        }
        let response = try await CurlTransport.shared.send(
            Federation.HTTPRequest(method: method, url: base + path, headers: headers, body: []))
        return Answer(status: response.status, headers: response.headers, body: String(decoding: response.body, as: UTF8.self))
    }

    /// The port it listens on.
    func port() async throws -> UInt16 {
        let base = try await server.baseURL()
        return try XCTUnwrap(UInt16(base.split(separator: ":").last ?? ""))
    }

    /// Sends `raw` bytes on a new connection and reads what comes back within `limit`
    /// (blocking reads, off the cooperative pool): the text, and whether the server closed.
    func exchange(_ raw: String, within limit: Duration = .seconds(2)) async throws -> (text: String, closed: Bool) {
        let port = try await port()
        let connection = try XCTUnwrap(HalfSentRequest(port: port, sending: raw), "could not connect")
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: connection.readAll(within: limit)) }
        }
    }

    func stop() async throws {
        await server.shutdown()
        try await task.value
    }
}

/// A raw loopback connection that sends the start of a request and never the rest (what a
/// client holding connections open does), or whatever else a test gives it.
final class HalfSentRequest: Sendable {
    enum Outcome: Sendable {
        /// The server closed the connection, this long after it was opened.
        case closed(after: Duration)
        case stillOpen
        /// The server sent bytes (it must not: the request was never complete).
        case answered(String)
    }

    private let descriptor: Int32
    private let opened = ContinuousClock.now

    init?(port: UInt16, sending text: String = "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\n") {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        let start = Array(text.utf8)
        guard connected == 0, send(fd, start, start.count, 0) == start.count else {
            close(fd)
            return nil
        }
        descriptor = fd
    }

    deinit { close(descriptor) }

    /// Whether the server has closed the connection, without waiting.
    var isClosedByServer: Bool {
        var byte: UInt8 = 0
        let count = recv(descriptor, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK))
        return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }

    /// Whether the server has closed the connection once what it sent is read, without
    /// waiting (its answers are read and dropped).
    var isClosedAfterItsAnswers: Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count > 0 { continue }
            return count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)
        }
    }

    /// Blocks until the server closes the connection, sends something, or `limit` passes.
    func waitForClose(within limit: Duration) -> Outcome {
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
    func readAll(within limit: Duration) -> (text: String, closed: Bool) {
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
