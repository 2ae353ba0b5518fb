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

/// A federating client over `keystore`, talking to `fake`, on the real clock or `now`.
func federatingClient(
    _ fake: FakeCognito, keystore: any Keystore, margin: Duration = .seconds(120), now: @escaping @Sendable () -> Date = { Date() }
) throws -> FederationClient {
    var configuration = FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint)
    configuration.expiryMargin = margin
    return try FederationClient(
        configuration: configuration, transport: fake.transport, keystore: keystore, environment: [:],
        now: now, logger: nil)
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

    /// GET (or `method`) `path` with `authorization` (by default the token of the session
    /// `path` names, or of the first session served; `nil` for none).
    func request(
        _ path: String, method: String = "GET", authorization: String?? = .some(nil)
    ) async throws -> Answer {
        let base = try await server.baseURL()
        var headers: [(name: String, value: String)] = []
        switch authorization {
        case .some(.some(let value)): headers.append(("Authorization", value))
        case .some(.none): headers.append(("Authorization", try token(for: path).value))
        case .none: break
        }
        let response = try await CurlTransport.shared.send(
            Federation.HTTPRequest(method: method, url: base + path, headers: headers, body: []))
        return Answer(status: response.status, headers: response.headers, body: String(decoding: response.body, as: UTF8.self))
    }

    /// The token of the session `path` names, or of the first session served.
    func token(for path: String = "") throws -> CredentialServerToken {
        let named = String(path.dropFirst(CredentialResponder.pathPrefix.count))
        return try server.authorizationToken(for: server.sessions.contains(named) ? named : server.sessions[0])
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

