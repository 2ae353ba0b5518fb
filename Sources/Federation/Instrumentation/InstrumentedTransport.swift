import CoreMetrics
import SecureStorage
import Tracing

/// A transport that counts and traces every request it passes to `base`.
///
/// The operation is read from what the request already carries (`X-Amz-Target` for JSON
/// 1.1 services, `Action=` for query-protocol ones); nothing else of the request or the
/// response (no header value but the request ID, no body) reaches a metric or a span.
struct InstrumentedTransport: HTTPTransport {
    let base: any HTTPTransport
    let instrumentation: FederationInstrumentation

    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (service, operation) = Self.operation(of: request)
        if request.attempt > 1, let metrics = instrumentation.metrics {
            Counter(label: "identity_broker_retries_total", dimensions: instrumentation.dimensions([("service", service), ("operation", operation)]), factory: metrics)
                .increment()
        }
        guard let tracer = instrumentation.tracer else {
            return try await sendCounting(request, service: service, operation: operation)
        }
        let span = tracer.startSpan("\(service)/\(operation)", ofKind: .client)
        span.attributes["rpc.system"] = "aws-api"
        span.attributes["rpc.service"] = service
        span.attributes["rpc.method"] = operation
        span.attributes["broker.attempt"] = request.attempt
        defer { span.end() }
        do {
            let response = try await sendCounting(request, service: service, operation: operation)
            span.attributes["http.response.status_code"] = response.status
            if let requestId = response.header("x-amzn-requestid") ?? response.header("x-amz-request-id"),
               Self.isRequestIdShaped(requestId), !Self.echoes(requestId, request)
            {
                span.attributes["aws.request_id"] = requestId
            }
            if response.status >= 400 { span.setStatus(SpanStatus(code: .error)) }
            return response
        } catch {
            span.attributes["error.type"] = Self.failureKind(error)
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }

    /// The statuses AWS's services answer with are labelled as they are; any other (a proxy's,
    /// or a hostile endpoint's, which could pick hundreds) by its class, so the label has a
    /// bounded set of values.
    static func statusLabel(_ status: Int) -> String {
        switch status {
        case 200, 400, 403, 404, 413, 429, 500, 502, 503, 504: String(status)
        case 100...599: "\(status / 100)xx"
        default: "other"
        }
    }

    private func sendCounting(_ request: HTTPRequest, service: String, operation: String) async throws -> HTTPResponse {
        guard let metrics = instrumentation.metrics else { return try await base.send(request) }
        let status: String
        do {
            let response = try await base.send(request)
            status = Self.statusLabel(response.status)
            Counter(label: "identity_broker_requests_total", dimensions: instrumentation.dimensions([("service", service), ("operation", operation), ("status", status)]), factory: metrics)
                .increment()
            return response
        } catch {
            Counter(label: "identity_broker_requests_total", dimensions: instrumentation.dimensions([("service", service), ("operation", operation), ("status", Self.failureKind(error))]), factory: metrics)
                .increment()
            throw error
        }
    }

    /// `CognitoIdentity`/`GetId` from `X-Amz-Target: AWSCognitoIdentityService.GetId`;
    /// `STS`/`AssumeRoleWithWebIdentity` from a form body's `Action=`.
    static func operation(of request: HTTPRequest) -> (service: String, operation: String) {
        if let target = request.header("X-Amz-Target"), let dot = target.lastIndex(of: ".") {
            let prefix = target[..<dot]
            let service = prefix == "AWSCognitoIdentityService" ? "CognitoIdentity" : String(prefix.prefix(64))
            return (service, String(target[target.index(after: dot)...].prefix(64)))
        }
        let body = request.body.prefix(256)
        if let range = body.firstRange(of: Array("Action=".utf8)) {
            let value = body[range.upperBound...].prefix { $0 != UInt8(ascii: "&") }
            return ("STS", String(decoding: value.prefix(64), as: UTF8.self))
        }
        return ("unknown", "unknown")
    }

    /// An AWS request ID as the services send them: a UUID (Cognito, STS), or 16 to 64
    /// hexadecimal digits (S3). Anything else is not recorded: the header comes from the
    /// endpoint, which may echo what it was sent, a token among it, and span attributes are
    /// exported as they are.
    static func isRequestIdShaped(_ value: String) -> Bool {
        let utf8 = value.utf8
        let isHex: (UInt8) -> Bool = { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x46) || ($0 >= 0x61 && $0 <= 0x66) }
        if (16...64).contains(utf8.count), utf8.allSatisfy(isHex) { return true }
        let groups = utf8.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
        return groups.map(\.count) == [8, 4, 4, 4, 12] && groups.allSatisfy { $0.allSatisfy(isHex) }
    }

    /// Whether `requestId` shares a run of ``SecretRedactor/minimumRun`` characters with what
    /// `request` sent (its body or a header value): a hex custom token, echoed back by a
    /// misbehaving endpoint or proxy, is request-ID-shaped too.
    static func echoes(_ requestId: String, _ request: HTTPRequest) -> Bool {
        let redactor = SecretRedactor(secrets: [requestId])
        let body = String(decoding: request.body, as: UTF8.self)
        return redactor.redact(body) != body || request.headers.contains { redactor.redact($0.value) != $0.value }
    }

    static func failureKind(_ error: any Error) -> String {
        if let transport = error as? TransportError { return "\(transport.kind)" }
        if error is CancellationError { return "cancelled" }
        return "error"
    }
}
