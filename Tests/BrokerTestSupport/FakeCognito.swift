#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import Federation
package import Foundation
import Synchronization

/// A scripted Cognito Identity service, and STS for the classic flow: the one fake of the
/// service for every test target.
///
/// It answers either through the injected transport (``transport``, a ``ClosureTransport``),
/// or over real HTTP on a ``LoopbackHTTPServer`` (``serve()``, then ``endpoint``) for tests
/// that must cross libcurl or run the `federate` binary. On the loopback server a reply can
/// also be a fault below HTTP (``Reply/wire(_:)``: drops, resets, truncation, slow drips,
/// oversize bodies), and ``closesConnections`` ends each connection after its answer.
///
/// Requests are routed by `X-Amz-Target` (`AWSCognitoIdentityService.GetId`, …), and
/// STS's form-encoded Query requests by their `Action` (`AssumeRoleWithWebIdentity`).
/// Each operation answers from its queue of scripted replies first, then from
/// its default (GetId: ``defaultIdentityId``; GetCredentialsForIdentity: the
/// requested identity with ``accessKeyId``/``secretKey``/``sessionToken`` expiring at
/// ``expiration``, or ``credentialLifetime`` after the request when that is set; with
/// ``numbersCredentials`` each default answer has a new access key ID). Every call is recorded, and the number of requests in flight
/// at once is tracked so tests can tell serialised work from concurrent work.
package final class FakeCognito: Sendable {
    /// The operations IdentityBroker calls.
    package enum Operation: String, Sendable, CaseIterable {
        case getId = "GetId"
        case getCredentialsForIdentity = "GetCredentialsForIdentity"
        case getOpenIdToken = "GetOpenIdToken"
        case getOpenIdTokenForDeveloperIdentity = "GetOpenIdTokenForDeveloperIdentity"
        /// STS, through the Query protocol (no `X-Amz-Target`).
        case assumeRoleWithWebIdentity = "AssumeRoleWithWebIdentity"

        /// The `X-Amz-Target` header value.
        package var target: String { "AWSCognitoIdentityService.\(rawValue)" }
    }

    /// One answer.
    package struct Reply: Sendable {
        package var status: Int
        package var headers: [(name: String, value: String)]
        package var body: [UInt8]
        /// Waited before answering (in addition to the fake's ``responseDelay``).
        package var delay: Duration = .zero
        /// When set, the transport throws this instead of answering (on the loopback
        /// server: the connection is reset).
        package var failure: TransportError?
        /// A fault below HTTP for the loopback server (see ``wire(_:)``).
        var wireFault: ScriptedResponse.Action?
        /// Whether the loopback server closes the connection after this answer.
        package var closesConnection = false

        package init(status: Int, headers: [(name: String, value: String)] = FakeCognito.jsonHeaders, body: [UInt8]) {
            self.status = status
            self.headers = headers
            self.body = body
        }

        /// A response with `body` as given.
        package static func raw(status: Int = 200, headers: [(name: String, value: String)] = FakeCognito.jsonHeaders, body: String) -> Reply {
            Reply(status: status, headers: headers, body: Array(body.utf8))
        }

        /// A GetId success.
        package static func identityId(_ identityId: String) -> Reply {
            Reply(status: 200, body: FakeCognito.getIdBody(identityId: identityId))
        }

        /// A GetCredentialsForIdentity success.
        package static func credentials(
            identityId: String,
            accessKeyId: String = FakeCognito.accessKeyId,
            secretKey: String = FakeCognito.secretKey,
            sessionToken: String = FakeCognito.sessionToken,
            expiration: Date
        ) -> Reply {
            Reply(
                status: 200,
                body: FakeCognito.credentialsBody(
                    identityId: identityId, accessKeyId: accessKeyId, secretKey: secretKey,
                    sessionToken: sessionToken, expirationLiteral: FakeCognito.epochLiteral(expiration))
            )
        }

        /// A JSON 1.1 error: `{"__type": type, messageKey: message}` with `status`.
        package static func error(
            _ type: String?,
            message: String? = nil,
            status: Int = 400,
            messageKey: String = "message",
            headers: [(name: String, value: String)] = FakeCognito.jsonHeaders
        ) -> Reply {
            Reply(status: status, headers: headers, body: FakeCognito.errorBody(type: type, message: message, messageKey: messageKey))
        }

        /// An STS `AssumeRoleWithWebIdentity` success (XML); `expiration` as ISO 8601 with a fraction.
        package static func assumedRole(
            roleArn: String = FakeCognito.assumedRoleArn,
            subject: String? = FakeCognito.defaultIdentityId,
            accessKeyId: String = FakeCognito.stsAccessKeyId,
            secretAccessKey: String = FakeCognito.stsSecretKey,
            sessionToken: String = FakeCognito.stsSessionToken,
            expiration: Date
        ) -> Reply {
            Reply(status: 200, headers: FakeCognito.xmlHeaders, body: Array(FakeCognito.assumedRoleBody(
                roleArn: roleArn, subject: subject, accessKeyId: accessKeyId, secretAccessKey: secretAccessKey,
                sessionToken: sessionToken, expirationLiteral: FakeCognito.iso8601(expiration)).utf8))
        }

        /// An STS error: `ErrorResponse/Error/{Type,Code,Message}` with `status`.
        package static func stsError(_ code: String, message: String? = "scripted", type: String = "Sender", status: Int = 400) -> Reply {
            Reply(status: status, headers: FakeCognito.xmlHeaders, body: Array(FakeCognito.stsErrorBody(code: code, message: message, type: type).utf8))
        }

        /// The transport fails with `error` instead of answering.
        package static func transportFailure(_ error: TransportError) -> Reply {
            var reply = Reply(status: 0, body: [])
            reply.failure = error
            return reply
        }

        /// The loopback server's `response` as the reply, faults below HTTP included (drop,
        /// reset, truncation, slow drip, oversize body). Through the transport a complete
        /// answer (plain or dripped) is returned whole, an oversize one fails as
        /// `responseTooLarge`, and a dropped, reset or truncated one as `connectionLost`.
        package static func wire(_ response: ScriptedResponse) -> Reply {
            var reply: Reply
            switch response.action {
            case .respond(let status, let headers, let body):
                reply = Reply(status: status, headers: headers, body: body)
            default:
                reply = Reply(status: 0, headers: [], body: [])
                reply.wireFault = response.action
            }
            reply.delay = response.delay
            reply.closesConnection = response.closesConnection
            return reply
        }

        /// The same reply, answered after `delay`.
        package func delayed(by delay: Duration) -> Reply {
            var copy = self
            copy.delay = delay
            return copy
        }
    }

    /// One request the fake received.
    package struct Call: Sendable {
        /// The operation named by `X-Amz-Target` (the part after the service name), or the raw header.
        package let operation: String
        package let method: String
        package let url: String
        package let headers: [(name: String, value: String)]
        package let body: [UInt8]
        /// When the fake received it.
        package let time: ContinuousClock.Instant
        /// The loopback server's connection that carried it (1 for the first); `nil` through the transport.
        package let connectionID: Int?

        /// The value of the first header named `name` (case-insensitive).
        package func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }

        /// The body decoded with `JSONSerialization`; empty when it is not a JSON object.
        package var json: [String: Any] {
            ((try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]) ?? [:]
        }

        /// The string at `key` of the body.
        package func string(_ key: String) -> String? { json[key] as? String }

        /// Whether the body has `key` at all.
        package func has(_ key: String) -> Bool { json[key] != nil }

        /// The body's `Logins` map, or `nil` when absent.
        package var logins: [String: String]? { json["Logins"] as? [String: String] }

        /// The body as text.
        package var bodyText: String { String(decoding: body, as: UTF8.self) }

        /// A form-encoded (Query protocol) body's parameters, decoded, in order.
        package var form: [(name: String, value: String)] {
            bodyText.split(separator: "&").map { pair in
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let decode = { (text: Substring) in String(text).removingPercentEncoding ?? String(text) }
                return (decode(parts[0]), parts.count > 1 ? decode(parts[1]) : "")
            }
        }

        /// The first form parameter named `name`.
        package func formValue(_ name: String) -> String? { form.first { $0.name == name }?.value }
    }

    /// Builds a reply from the call it answers.
    package typealias Responder = @Sendable (Call) -> Reply

    // MARK: Canned values

    package static let jsonHeaders: [(name: String, value: String)] = [
        ("Content-Type", "application/x-amz-json-1.1"),
        ("x-amzn-RequestId", "00000000-0000-0000-0000-000000000000"),
    ]
    /// An identity pool ID for tests to configure (the fake answers any).
    package static let poolId = "us-east-1:99999999-8888-7777-6666-555555555555"
    package static let defaultIdentityId = "us-east-1:aaaaaaaa-0000-0000-0000-000000000001"
    package static let accessKeyId = "ASIAFAKEACCESSKEY0001"
    package static let secretKey = "fAkEsEcReTkEy/wJalrXUtnFEMI/K7MDENG/bPxRfiCY"
    package static let sessionToken = "FaKeSeSsIoNtOkEn//////////wEaCXVzLWVhc3QtMSJHMEUCIQD"
    /// The Cognito OpenID token the fake's GetOpenIdToken hands out by default (the classic flow's web identity token).
    package static let openIdToken = "eyJraWQiOiJmYWtlIn0.eyJzdWIiOiJmYWtlLW9wZW5pZC1zdWJqZWN0In0.ZmFrZU9wZW5JZFNpZ25hdHVyZTAwMDE"
    package static let assumedRoleArn = "arn:aws:sts::123456789012:assumed-role/ClassicRole/broker-session"
    package static let stsAccessKeyId = "ASIASTSFAKEACCESS001"
    package static let stsSecretKey = "sTsFaKeSeCrEtKeY/wJalrXUtnFEMI/K7MDENG/bPxRfiCZ"
    package static let stsSessionToken = "StSfAkEsEsSiOnToKeN//////////wEaCXVzLWVhc3QtMSJIMEYCIQE"
    package static let xmlHeaders: [(name: String, value: String)] = [
        ("Content-Type", "text/xml"),
        ("x-amzn-RequestId", "00000000-0000-0000-0000-000000000000"),
    ]

    // MARK: State

    private struct State {
        var queues: [String: [Responder]] = [:]
        var defaults: [String: Responder] = [:]
        var calls: [Call] = []
        var inFlight = 0
        var maxInFlight = 0
        var responseDelay: Duration = .zero
        var barrier: (count: Int, timeout: Duration)?
        var barrierOpen = false
        var expiration: Date
        var credentialLifetime: TimeInterval?
        var numbersCredentials = false
        var issued: [String: Int] = [:]
        var closesConnections = false
        var server: LoopbackHTTPServer?
    }

    private let state: Mutex<State>

    /// Creates a fake whose default credentials expire at `expiration`.
    package init(expiration: Date = Date(timeIntervalSince1970: 1_700_003_600)) {
        state = Mutex(State(expiration: expiration))
    }

    /// Creates a fake on the real clock: default credentials expire `credentialLifetime`
    /// seconds after the request, and with `numbersCredentials` each default answer has a
    /// new access key ID (``accessKeyId(_:)``), so a test can tell which answer a session holds.
    package init(credentialLifetime: TimeInterval, numbersCredentials: Bool = false) {
        var initial = State(expiration: Date(timeIntervalSince1970: 0))
        initial.credentialLifetime = credentialLifetime
        initial.numbersCredentials = numbersCredentials
        state = Mutex(initial)
    }

    /// A transport that sends every request to this fake.
    package var transport: ClosureTransport {
        ClosureTransport { [self] request in try await self.handle(request) }
    }

    // MARK: Serving over loopback HTTP

    /// Starts serving this fake on a ``LoopbackHTTPServer`` (once; later calls return the
    /// same server). The server lives as long as the fake, or until ``stopServing()``.
    @discardableResult
    package func serve() throws -> LoopbackHTTPServer {
        try state.withLock { state in
            if let server = state.server { return server }
            // Weak: the fake owns the server, and dropping the fake stops it.
            let server = try LoopbackHTTPServer { [weak self] request in
                self?.answer(request) ?? .respond(status: 503, text: "FakeCognito: gone")
            }
            state.server = server
            return server
        }
    }

    /// The server started by ``serve()``, if any.
    package var server: LoopbackHTTPServer? { state.withLock { $0.server } }

    /// A fake on the real clock (see ``init(credentialLifetime:numbersCredentials:)``),
    /// already served on a loopback server.
    package static func served(credentialLifetime: TimeInterval = 3600, numbersCredentials: Bool = false) throws -> FakeCognito {
        let fake = FakeCognito(credentialLifetime: credentialLifetime, numbersCredentials: numbersCredentials)
        try fake.serve()
        return fake
    }

    /// The served endpoint, `http://127.0.0.1:<port>/`; ``serve()`` must have been called.
    package var endpoint: String {
        guard let server else { preconditionFailure("FakeCognito.endpoint before serve()") }
        return server.url("/")
    }

    /// Stops the loopback server: from then on connecting to ``endpoint`` is refused.
    package func stopServing() { server?.stop() }

    /// Whether the loopback server closes each connection after its answer, so every
    /// request starts on a fresh connection (`false`, the default, keeps them alive).
    package var closesConnections: Bool {
        get { state.withLock { $0.closesConnections } }
        set { state.withLock { $0.closesConnections = newValue } }
    }

    // MARK: Scripting

    /// Answers the next unanswered calls of `operation` with `replies`, in order (FIFO).
    package func enqueue(_ replies: Reply..., for operation: Operation) {
        for reply in replies { enqueue(for: operation) { _ in reply } }
    }

    /// Answers the next unanswered calls of `operation` with the loopback server's
    /// `responses` (see ``Reply/wire(_:)``), in order.
    package func enqueue(_ responses: ScriptedResponse..., for operation: Operation) {
        for response in responses { enqueue(.wire(response), for: operation) }
    }

    /// Answers the next unanswered call of `operation` with `responder`'s reply (FIFO).
    package func enqueue(for operation: Operation, _ responder: @escaping Responder) {
        state.withLock { $0.queues[operation.rawValue, default: []].append(responder) }
    }

    /// Answers every call of `operation` with no queued reply with `reply`; `nil`
    /// restores the built-in default.
    package func setDefault(_ reply: Reply?, for operation: Operation) {
        guard let reply else {
            state.withLock { _ = $0.defaults.removeValue(forKey: operation.rawValue) }
            return
        }
        setDefault(for: operation) { _ in reply }
    }

    /// Answers every call of `operation` with no queued reply with the loopback server's
    /// `response` (see ``Reply/wire(_:)``).
    package func setDefault(_ response: ScriptedResponse, for operation: Operation) {
        setDefault(.wire(response), for: operation)
    }

    /// Answers every call of every operation with no queued reply with `reply`.
    package func setDefaultForAll(_ reply: Reply) {
        for operation in Operation.allCases { setDefault(reply, for: operation) }
    }

    /// Answers every call of `operation` with no queued reply with `responder`'s reply.
    package func setDefault(for operation: Operation, _ responder: @escaping Responder) {
        state.withLock { $0.defaults[operation.rawValue] = responder }
    }

    /// The expiration of default credentials.
    package var expiration: Date {
        get { state.withLock { $0.expiration } }
        set { state.withLock { $0.expiration = newValue } }
    }

    /// Waited before every answer.
    package var responseDelay: Duration {
        get { state.withLock { $0.responseDelay } }
        set { state.withLock { $0.responseDelay = newValue } }
    }

    /// A one-shot gate: holds each request until `count` requests have been in
    /// flight at once (from then on nothing is held), or until `timeout` passes
    /// for that request; `nil` (the default) holds nothing. Makes concurrency
    /// tests independent of scheduling speed.
    package func holdUntilInFlight(_ count: Int?, timeout: Duration = .seconds(5)) {
        state.withLock {
            $0.barrier = count.map { ($0, timeout) }
            $0.barrierOpen = false
        }
    }

    // MARK: Inspecting

    /// Every call so far, in arrival order.
    package var calls: [Call] { state.withLock { $0.calls } }

    /// The calls of `operation`, in arrival order.
    package func calls(_ operation: Operation) -> [Call] {
        calls.filter { $0.operation == operation.rawValue }
    }

    /// The number of calls of `operation`.
    package func count(_ operation: Operation) -> Int { calls(operation).count }

    /// The operations called, in order.
    package var operations: [String] { calls.map(\.operation) }

    /// The most requests that were in flight at once, through ``transport``. (Served over
    /// loopback, a request stops counting when its answer is chosen, before its scripted
    /// delay, so this would undercount there.)
    package var maxInFlight: Int { state.withLock { $0.maxInFlight } }

    /// Forgets recorded calls and the in-flight maximum (scripts are kept).
    package func resetRecording() {
        state.withLock {
            $0.calls = []
            $0.maxInFlight = $0.inFlight
        }
    }

    /// The access key ID of the `number`th default answer when ``numbersCredentials`` is set
    /// (the first is ``accessKeyId``).
    package static func accessKeyId(_ number: Int) -> String {
        "ASIAFAKEACCESSKEY" + String(repeating: "0", count: max(0, 4 - String(number).count)) + String(number)
    }

    /// The STS access key ID of the `number`th default answer when ``numbersCredentials`` is
    /// set (the first is ``stsAccessKeyId``).
    package static func stsAccessKeyId(_ number: Int) -> String {
        "ASIASTSFAKEACCESS" + String(repeating: "0", count: max(0, 3 - String(number).count)) + String(number)
    }

    // MARK: Bodies

    /// `{"IdentityId": …}`.
    package static func getIdBody(identityId: String) -> [UInt8] {
        jsonBytes(["IdentityId": identityId])
    }

    /// A GetCredentialsForIdentity body; `expirationLiteral` is put in verbatim
    /// (a JSON number such as `1700003600`, `1.7000036E9` or `1700003600.25`).
    /// Pass `nil` for a field to leave it out.
    package static func credentialsBody(
        identityId: String?,
        accessKeyId: String? = FakeCognito.accessKeyId,
        secretKey: String? = FakeCognito.secretKey,
        sessionToken: String? = FakeCognito.sessionToken,
        expirationLiteral: String? = "1700003600"
    ) -> [UInt8] {
        var fields: [String] = []
        if let accessKeyId { fields.append("\"AccessKeyId\":\(quoted(accessKeyId))") }
        if let expirationLiteral { fields.append("\"Expiration\":\(expirationLiteral)") }
        if let secretKey { fields.append("\"SecretKey\":\(quoted(secretKey))") }
        if let sessionToken { fields.append("\"SessionToken\":\(quoted(sessionToken))") }
        var top = ["\"Credentials\":{\(fields.joined(separator: ","))}"]
        if let identityId { top.append("\"IdentityId\":\(quoted(identityId))") }
        return Array("{\(top.joined(separator: ","))}".utf8)
    }

    /// A complete GetCredentialsForIdentity body as text, expiring at `expiration`.
    package static func credentialsJSON(
        identityId: String = FakeCognito.defaultIdentityId,
        accessKeyId: String = FakeCognito.accessKeyId,
        secretKey: String = FakeCognito.secretKey,
        sessionToken: String = FakeCognito.sessionToken,
        expiration: Date
    ) -> String {
        String(decoding: credentialsBody(
            identityId: identityId, accessKeyId: accessKeyId, secretKey: secretKey, sessionToken: sessionToken,
            expirationLiteral: epochLiteral(expiration)), as: UTF8.self)
    }

    /// `{"__type": type, messageKey: message}`, leaving out what is `nil`.
    package static func errorBody(type: String?, message: String?, messageKey: String = "message") -> [UInt8] {
        var object: [String: Any] = [:]
        if let type { object["__type"] = type }
        if let message { object[messageKey] = message }
        return jsonBytes(object)
    }

    /// An `AssumeRoleWithWebIdentityResponse`, `expirationLiteral` put in verbatim.
    package static func assumedRoleBody(
        roleArn: String = FakeCognito.assumedRoleArn,
        subject: String? = FakeCognito.defaultIdentityId,
        accessKeyId: String = FakeCognito.stsAccessKeyId,
        secretAccessKey: String = FakeCognito.stsSecretKey,
        sessionToken: String = FakeCognito.stsSessionToken,
        expirationLiteral: String
    ) -> String {
        let subjectElement = subject.map { "<SubjectFromWebIdentityToken>\($0)</SubjectFromWebIdentityToken>" } ?? ""
        return """
            <AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
              <AssumeRoleWithWebIdentityResult>
                \(subjectElement)
                <Audience>us-east-1:11111111-2222-3333-4444-555555555555</Audience>
                <AssumedRoleUser><Arn>\(roleArn)</Arn><AssumedRoleId>AROACLKWSDQRAOEXAMPLE:broker-session</AssumedRoleId></AssumedRoleUser>
                <Credentials>
                  <SessionToken>\(sessionToken)</SessionToken>
                  <SecretAccessKey>\(secretAccessKey)</SecretAccessKey>
                  <Expiration>\(expirationLiteral)</Expiration>
                  <AccessKeyId>\(accessKeyId)</AccessKeyId>
                </Credentials>
                <Provider>cognito-identity.amazonaws.com</Provider>
              </AssumeRoleWithWebIdentityResult>
              <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId></ResponseMetadata>
            </AssumeRoleWithWebIdentityResponse>
            """
    }

    /// An STS `ErrorResponse`; `message` is XML-escaped.
    package static func stsErrorBody(code: String, message: String?, type: String = "Sender") -> String {
        let escaped = message.map {
            $0.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
        }
        let messageElement = escaped.map { "<Message>\($0)</Message>" } ?? ""
        return """
            <ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
              <Error><Type>\(type)</Type><Code>\(code)</Code>\(messageElement)</Error>
              <RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId>
            </ErrorResponse>
            """
    }

    /// `date` as ISO 8601 UTC with milliseconds, as STS writes it.
    package static func iso8601(_ date: Date) -> String {
        var style = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        style.timeZone = TimeZone(identifier: "UTC")!
        return date.formatted(style)
    }

    /// `date` as a JSON number of epoch seconds.
    package static func epochLiteral(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970
        if seconds == seconds.rounded() { return String(Int64(seconds)) }
        return String(seconds)
    }

    private static func jsonBytes(_ object: [String: Any]) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8))
    }

    private static func quoted(_ text: String) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: [text], options: [.fragmentsAllowed])) ?? Data("[\"\"]".utf8)
        let array = String(decoding: data, as: UTF8.self)
        return String(array.dropFirst().dropLast())
    }

    // MARK: Handling

    /// What to answer a call with, and how long to wait first.
    private struct Plan {
        var reply: Reply
        var wait: Duration
        var barrier: (count: Int, timeout: Duration)?
        var closesConnection: Bool
    }

    /// The operation a request names: its `X-Amz-Target` without the service name, or for
    /// a form-encoded (STS Query) request its `Action`.
    private static func operation(target: String?, contentType: String?, body: [UInt8]) -> String {
        let target = target ?? ""
        let prefix = "AWSCognitoIdentityService."
        if target.isEmpty, contentType?.hasPrefix("application/x-www-form-urlencoded") == true {
            let form = String(decoding: body, as: UTF8.self)
            let action = form.split(separator: "&").first { $0.hasPrefix("Action=") }
            return action.map { String($0.dropFirst("Action=".count)) } ?? ""
        }
        return target.hasPrefix(prefix) ? String(target.dropFirst(prefix.count)) : target
    }

    /// Records `call`, counts it in flight and picks its reply.
    private func receive(_ call: Call) -> Plan {
        let (responder, delay, barrier, closes) = state.withLock {
            state -> (Responder, Duration, (count: Int, timeout: Duration)?, Bool) in
            state.calls.append(call)
            state.inFlight += 1
            state.maxInFlight = max(state.maxInFlight, state.inFlight)
            if let barrier = state.barrier, state.inFlight >= barrier.count { state.barrierOpen = true }
            var number: Int?
            let responder: Responder
            if var queue = state.queues[call.operation], !queue.isEmpty {
                responder = queue.removeFirst()
                state.queues[call.operation] = queue
            } else if let configured = state.defaults[call.operation] {
                responder = configured
            } else {
                state.issued[call.operation, default: 0] += 1
                if state.numbersCredentials { number = state.issued[call.operation] }
                let expiration = state.credentialLifetime.map { Date().addingTimeInterval($0) } ?? state.expiration
                responder = Self.builtInDefault(operation: call.operation, expiration: expiration, number: number)
            }
            return (responder, state.responseDelay, state.barrier, state.closesConnections)
        }
        let reply = responder(call)
        return Plan(reply: reply, wait: delay + reply.delay, barrier: barrier, closesConnection: closes || reply.closesConnection)
    }

    private func finish() {
        state.withLock { $0.inFlight -= 1 }
    }

    private func barrierIsOpen() -> Bool { state.withLock { $0.barrierOpen } }

    private func handle(_ request: HTTPRequest) async throws -> HTTPResponse {
        let operation = Self.operation(
            target: request.header("X-Amz-Target"), contentType: request.header("Content-Type"), body: request.body)
        let call = Call(
            operation: operation, method: request.method, url: request.url, headers: request.headers, body: request.body,
            time: .now, connectionID: nil)
        let plan = receive(call)
        do {
            if let barrier = plan.barrier {
                let start = ContinuousClock.now
                while !barrierIsOpen(), ContinuousClock.now - start < barrier.timeout {
                    try await Task.sleep(for: .milliseconds(2))
                }
            }
            if plan.wait > .zero { try await Task.sleep(for: plan.wait) }
        } catch {
            finish()
            throw error
        }
        finish()
        let reply = plan.reply
        if let failure = reply.failure { throw failure }
        switch reply.wireFault {
        case nil:
            return HTTPResponse(status: reply.status, headers: reply.headers, body: reply.body)
        case .respond(let status, let headers, let body), .drip(let status, let headers, let body, _, _):
            return HTTPResponse(status: status, headers: headers, body: body)
        case .stream:
            throw TransportError(kind: .responseTooLarge, message: "FakeCognito: scripted oversize body")
        case .truncate, .drop, .reset:
            throw TransportError(kind: .connectionLost, message: "FakeCognito: scripted connection fault")
        }
    }

    /// Answers one request of the loopback server (on its connection thread).
    private func answer(_ request: RecordedRequest) -> ScriptedResponse {
        let operation = Self.operation(
            target: request.header("X-Amz-Target"), contentType: request.header("Content-Type"), body: request.body)
        let call = Call(
            operation: operation, method: request.method, url: request.target, headers: request.headers, body: request.body,
            time: .now, connectionID: request.connectionID)
        let plan = receive(call)
        defer { finish() }
        if let barrier = plan.barrier {
            let start = ContinuousClock.now
            while !barrierIsOpen(), ContinuousClock.now - start < barrier.timeout { usleep(2_000) }
        }
        let reply = plan.reply
        var response: ScriptedResponse
        if reply.failure != nil {
            response = .reset
        } else if let fault = reply.wireFault {
            response = ScriptedResponse(fault)
        } else {
            response = .respond(status: reply.status, headers: reply.headers, body: reply.body)
        }
        if plan.wait > .zero { response = response.delayed(by: plan.wait) }
        return plan.closesConnection ? response.closingConnection() : response
    }

    private static func builtInDefault(operation: String, expiration: Date, number: Int?) -> Responder {
        switch operation {
        case Operation.getId.rawValue:
            return { _ in .identityId(defaultIdentityId) }
        case Operation.getCredentialsForIdentity.rawValue:
            return { call in
                .credentials(
                    identityId: call.string("IdentityId") ?? defaultIdentityId,
                    accessKeyId: number.map(accessKeyId(_:)) ?? accessKeyId, expiration: expiration)
            }
        case Operation.getOpenIdToken.rawValue:
            return { call in
                Reply(status: 200, body: jsonBytes(["IdentityId": call.string("IdentityId") ?? defaultIdentityId, "Token": openIdToken]))
            }
        case Operation.assumeRoleWithWebIdentity.rawValue:
            return { call in
                let role = call.formValue("RoleArn")?.split(separator: "/").last.map(String.init) ?? "ClassicRole"
                let sessionName = call.formValue("RoleSessionName") ?? "session"
                return .assumedRole(
                    roleArn: "arn:aws:sts::123456789012:assumed-role/\(role)/\(sessionName)",
                    accessKeyId: number.map(stsAccessKeyId(_:)) ?? stsAccessKeyId, expiration: expiration)
            }
        default:
            return { _ in .error("UnknownOperationException", message: "unknown target") }
        }
    }
}
