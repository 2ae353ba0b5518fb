import BrokerTestSupport
import Foundation
import Synchronization

/// Cognito Identity on a ``LoopbackHTTPServer``, reached through libcurl, with a
/// script of faults per operation.
///
/// Requests are routed by `X-Amz-Target`, and STS's form-encoded ones (the classic
/// flow) by their `Action`. Each operation answers from its
/// queue of scripted responses first, then from its fallback when one is set
/// (``always(_:for:)``), else with a success: GetId returns ``identityId``;
/// GetCredentialsForIdentity returns the requested identity with fresh
/// credentials (a new access key ID each time, so a test can tell which answer
/// a session holds) that expire an hour from now. Every request's arrival time
/// is recorded, so tests can count attempts and measure the gap between them
/// at the server.
final class FaultyCognito: Sendable {
    enum Operation: String, Sendable {
        case getId = "GetId"
        case getCredentialsForIdentity = "GetCredentialsForIdentity"
        case getOpenIdToken = "GetOpenIdToken"
        case assumeRoleWithWebIdentity = "AssumeRoleWithWebIdentity"
    }

    /// One request as the server saw it.
    struct Arrival: Sendable {
        var operation: String
        var time: ContinuousClock.Instant
        var connectionID: Int
    }

    static let identityId = "us-east-1:0000aaaa-1111-2222-3333-444455556666"
    /// The Cognito OpenID token GetOpenIdToken hands out.
    static let openIdToken = "eyJraWQiOiJyZWxpYWJpbGl0eSJ9.eyJzdWIiOiJyZWxpYWJpbGl0eSJ9.UmVsaWFiaWxpdHlPcGVuSWRTaWduYXR1cmU"

    let server: LoopbackHTTPServer
    private let script: Script

    init() throws {
        let script = Script()
        self.script = script
        server = try LoopbackHTTPServer { request in script.respond(to: request) }
    }

    /// The endpoint to configure, `http://127.0.0.1:<port>/`.
    var endpoint: String { server.url("/") }

    /// Answers the next calls of `operation` with `responses`, in order.
    func enqueue(_ responses: ScriptedResponse..., for operation: Operation) {
        script.state.withLock { $0.queues[operation.rawValue, default: []].append(contentsOf: responses) }
    }

    /// Answers every call of `operation` with no queued response with `response`
    /// (`nil` restores the success).
    func always(_ response: ScriptedResponse?, for operation: Operation) {
        script.state.withLock { $0.fallbacks[operation.rawValue] = response }
    }

    /// Whether successes keep the connection open for reuse (the default), or
    /// close it so the next request starts on a fresh connection.
    func keepConnectionsAlive(_ keep: Bool) {
        script.state.withLock { $0.closesAfterSuccess = !keep }
    }

    /// Every request so far, in arrival order.
    var arrivals: [Arrival] { script.state.withLock { $0.arrivals } }

    /// The requests of `operation` so far.
    func arrivals(_ operation: Operation) -> [Arrival] {
        arrivals.filter { $0.operation == operation.rawValue }
    }

    /// The number of requests of `operation` so far: the attempts the server saw.
    func count(_ operation: Operation) -> Int { arrivals(operation).count }

    /// The operations requested so far, in order.
    var operations: [String] { arrivals.map(\.operation) }

    /// Forgets the recorded requests (scripts are kept).
    func resetArrivals() {
        script.state.withLock { $0.arrivals = [] }
    }

    /// Stops the server: from then on connecting to ``endpoint`` is refused.
    func stop() { server.stop() }

    // MARK: Bodies

    /// A GetCredentialsForIdentity success body for `identityId`.
    static func credentialsBody(identityId: String, accessKeyId: String, expiration: Date) -> String {
        """
        {"Credentials":{"AccessKeyId":"\(accessKeyId)","Expiration":\(Int64(expiration.timeIntervalSince1970)),\
        "SecretKey":"rEliAbIlItYsEcReT/\(accessKeyId)","SessionToken":"rEliAbIlItYtOkEn//\(accessKeyId)"},\
        "IdentityId":"\(identityId)"}
        """
    }

    /// An `AssumeRoleWithWebIdentity` success body.
    static func assumedRoleBody(accessKeyId: String, expiration: Date) -> String {
        FakeCognito.assumedRoleBody(
            roleArn: "arn:aws:sts::123456789012:assumed-role/ClassicRole/alice", subject: identityId, accessKeyId: accessKeyId,
            secretAccessKey: "rEliAbIlItYsTsSeCrEt/\(accessKeyId)", sessionToken: "rEliAbIlItYsTsToKeN//\(accessKeyId)",
            expirationLiteral: FakeCognito.iso8601(expiration))
    }

    /// `{"__type": type, "message": message}`.
    static func errorBody(_ type: String, message: String = "scripted") -> String {
        #"{"__type":"\#(type)","message":"\#(message)"}"#
    }

    // MARK: Handling

    private final class Script: Sendable {
        struct State {
            var queues: [String: [ScriptedResponse]] = [:]
            var fallbacks: [String: ScriptedResponse] = [:]
            var arrivals: [Arrival] = []
            var issued = 0
            var closesAfterSuccess = false
        }

        let state = Mutex(State())

        func respond(to request: RecordedRequest) -> ScriptedResponse {
            let target = request.header("X-Amz-Target") ?? ""
            var operation = target.split(separator: ".").last.map(String.init) ?? target
            if target.isEmpty, let action = request.bodyText.split(separator: "&").first(where: { $0.hasPrefix("Action=") }) {
                operation = String(action.dropFirst("Action=".count))
            }
            let arrival = Arrival(operation: operation, time: .now, connectionID: request.connectionID)
            let (scripted, issued, closes) = state.withLock { state -> (ScriptedResponse?, Int, Bool) in
                state.arrivals.append(arrival)
                if var queue = state.queues[operation], !queue.isEmpty {
                    let next = queue.removeFirst()
                    state.queues[operation] = queue
                    return (next, state.issued, false)
                }
                if let fallback = state.fallbacks[operation] { return (fallback, state.issued, false) }
                state.issued += 1
                return (nil, state.issued, state.closesAfterSuccess)
            }
            if let scripted { return scripted }
            let success = success(operation: operation, request: request, issued: issued)
            return closes ? success.closingConnection() : success
        }

        private func success(operation: String, request: RecordedRequest, issued: Int) -> ScriptedResponse {
            switch operation {
            case Operation.getId.rawValue:
                return .json(#"{"IdentityId":"\#(FaultyCognito.identityId)"}"#)
            case Operation.getCredentialsForIdentity.rawValue:
                let object = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any]
                let identityId = object?["IdentityId"] as? String ?? FaultyCognito.identityId
                return .json(FaultyCognito.credentialsBody(
                    identityId: identityId,
                    accessKeyId: "ASIARELIABILITY\(issued)",
                    expiration: Date().addingTimeInterval(3600)))
            case Operation.getOpenIdToken.rawValue:
                return .json(#"{"IdentityId":"\#(FaultyCognito.identityId)","Token":"\#(FaultyCognito.openIdToken)"}"#)
            case Operation.assumeRoleWithWebIdentity.rawValue:
                return .respond(headers: [("Content-Type", "text/xml")], text: FaultyCognito.assumedRoleBody(
                    accessKeyId: "ASIASTSRELIABLE\(issued)", expiration: Date().addingTimeInterval(3600)))
            default:
                return .json(status: 400, FaultyCognito.errorBody("UnknownOperationException"))
            }
        }
    }
}
