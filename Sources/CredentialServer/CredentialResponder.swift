#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Federation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Answers every request the server receives, in this order:
///
/// 1. `Authorization` missing → 401, the token of no session served → 403 (a fixed body,
///    whatever the path);
/// 2. a path that is not `/credentials/<the session whose token came>` → 404 `NotFound`, the
///    same whether another session is served there or none is: each session has its own
///    token, and one child must not read, or learn of, another's session;
/// 3. a method other than `GET` → 405 with `Allow: GET`;
/// 4. the session's credentials as the keystore holds them now → 200; no valid ones → 404
///    `NoValidCredentials`, a terminated identity → 410 `IdentityTerminated`, an unreadable
///    keystore → 503 `KeystoreUnavailable`.
///
/// Every answer but a 200 closes the connection once written: a local user without the
/// token must not be able to hold connections open (by sending a refused request every few
/// seconds, or a body a byte at a time) until the server's connection limit is reached.
/// A 200 closes it when the request asked for that (`Connection: close`, which
/// ``ConnectionPolicy`` also puts on an HTTP/1.0 request without keep-alive).
struct CredentialResponder: HTTPResponder {
    typealias Context = BasicRequestContext

    static let pathPrefix = "/credentials/"

    let client: FederationClient
    /// Each served session's token.
    let tokens: [String: CredentialServerToken]
    let logger: Logger

    func respond(to request: Request, context: Context) async throws -> Response {
        var response = await answer(request)
        if request.headers[.connection] == "close" {
            response.headers[.connection] = "close"
        }
        if response.status != .ok {
            // Said, so that a client does not reuse the connection; and done:
            // ``ConnectionPolicy`` ends reading when it sees this.
            response.headers[.connection] = "close"
        }
        return response
    }

    private func answer(_ request: Request) async -> Response {
        guard let authorization = request.headers[.authorization] else {
            logger.debug("credential request refused", metadata: ["broker.status": "401", "broker.reason": "no Authorization header"])
            return Self.failure(.unauthorized, "Unauthorized", "this endpoint needs an Authorization header")
        }
        // The session whose token came, found by comparing every token (none skipped, none
        // looked up by the path), so that how long a refusal takes depends only on how many
        // sessions are served: not on the path, nor on whether a session is served there.
        var owner: String?
        if let presented = CredentialServerToken.presented(in: authorization) {
            for (session, token) in tokens where token.matches(presented) {
                owner = session
            }
        }
        guard let session = owner else {
            logger.debug("credential request refused", metadata: ["broker.status": "403", "broker.reason": "wrong token"])
            return Self.failure(.forbidden, "Forbidden", "the Authorization header does not match")
        }
        guard request.uri.path == Self.pathPrefix + session else {
            logger.debug("credential request for an unknown path", metadata: ["broker.status": "404"])
            return Self.failure(.notFound, "NotFound", "no session is served at this path for this token")
        }
        guard request.method == .get else {
            var response = Self.failure(.methodNotAllowed, "MethodNotAllowed", "only GET is served")
            response.headers[.allow] = "GET"
            return response
        }
        do throws(FederationError) {
            let credentials = try await client.credentialsReadingStore(for: session)
            // `Expiration` goes out rounded down to the second: in their last second (an expiry
            // margin of zero) credentials would go out already expired, which the SDKs refuse
            // as "refreshed credentials are still expired".
            guard ContainerCredentialsBody.Credentials.expirationSent(for: credentials) > client.now() else {
                throw FederationError(code: .noValidCredentials, message: "session '\(session)' has credentials in their last second")
            }
            logger.debug("credentials served", metadata: ["broker.session": "\(session)", "broker.status": "200"])
            return Self.json(.ok, ContainerCredentialsBody.Credentials(credentials))
        } catch {
            let (status, code, message) = Self.refusal(error, session: session)
            logger.debug(
                "credentials not served",
                metadata: ["broker.session": "\(session)", "broker.status": "\(status.code)", "broker.error": "\(error.code)"])
            return Self.failure(status, code, message)
        }
    }

    static func refusal(_ error: FederationError, session: String) -> (HTTPTypes.HTTPResponse.Status, String, String) {
        switch error.code {
        case .noValidCredentials:
            (.notFound, "NoValidCredentials", "session '\(session)' has no valid credentials (never federated, expired or cleared); push a new provider token")
        case .identityTerminated:
            (.gone, "IdentityTerminated", "session '\(session)' is terminated: its identity is gone; clear the session, then federate again")
        case .storage:
            (.serviceUnavailable, "KeystoreUnavailable", "the keystore holding session '\(session)' could not be read")
        default:
            (.internalServerError, "InternalError", "session '\(session)' could not be read (\(error.code))")
        }
    }

    static func failure(_ status: HTTPTypes.HTTPResponse.Status, _ code: String, _ message: String) -> Response {
        json(status, ContainerCredentialsBody.Failure(code: code, message: message))
    }

    static func json(_ status: HTTPTypes.HTTPResponse.Status, _ value: some Encodable) -> Response {
        var bytes = ContainerCredentialsBody.encode(value)
        let buffer = ByteBuffer(bytes: bytes)
        // The array may have held credentials; the buffer is the only copy that goes on.
        for index in bytes.indices { bytes[index] = 0 }
        return Response(
            status: status,
            headers: [.contentType: "application/json", .cacheControl: "no-store"],
            body: ResponseBody(byteBuffer: buffer))
    }
}
