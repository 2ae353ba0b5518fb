import CoreMetrics
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
            Counter(label: "identity_broker_retries_total", dimensions: [("service", service), ("operation", operation)], factory: metrics)
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
            if let requestId = response.header("x-amzn-requestid") ?? response.header("x-amz-request-id") {
                span.attributes["aws.request_id"] = String(requestId.prefix(128))
            }
            if response.status >= 400 { span.setStatus(SpanStatus(code: .error)) }
            return response
        } catch {
            span.attributes["error.type"] = Self.failureKind(error)
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }

    private func sendCounting(_ request: HTTPRequest, service: String, operation: String) async throws -> HTTPResponse {
        guard let metrics = instrumentation.metrics else { return try await base.send(request) }
        let status: String
        do {
            let response = try await base.send(request)
            status = String(response.status)
            Counter(label: "identity_broker_requests_total", dimensions: [("service", service), ("operation", operation), ("status", status)], factory: metrics)
                .increment()
            return response
        } catch {
            Counter(label: "identity_broker_requests_total", dimensions: [("service", service), ("operation", operation), ("status", Self.failureKind(error))], factory: metrics)
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

    static func failureKind(_ error: any Error) -> String {
        if let transport = error as? TransportError { return "\(transport.kind)" }
        if error is CancellationError { return "cancelled" }
        return "error"
    }
}
