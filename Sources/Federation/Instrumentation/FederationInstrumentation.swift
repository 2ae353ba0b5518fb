public import CoreMetrics
public import Tracing

/// Opt-in metrics (swift-metrics) and tracing (swift-distributed-tracing) for a
/// ``FederationClient``. Off by default: without it the client creates no metric and no
/// span at all.
///
/// ```swift
/// let client = try FederationClient(
///     configuration: configuration, keystore: keystore,
///     instrumentation: .global,      // what MetricsSystem / InstrumentationSystem were bootstrapped with
///     logger: logger)
/// ```
///
/// Metrics (every label prefixed `identity_broker_`):
/// - `federations_total` (counter; `result`: `success` or the ``FederationError/Code``,
///   `provider`: the provider's kind, `google`, `oidc`, `saml`, `custom`… without the issuer,
///   ARN or key it names, or `guest`: a bounded set, whatever issuers callers pass);
/// - `federation_duration_seconds` (timer; `result`);
/// - `requests_total` (counter; `service`, `operation`, `status`: the HTTP status when it is
///   one AWS answers with (200, 400, 403, 404, 413, 429, 500, 502, 503, 504), else its class
///   (`1xx`…`5xx`, `other`), or the transport failure kind);
/// - `retries_total` (counter; `service`, `operation`);
/// - `sessions` (gauge; `state`): sessions this client holds, by state. Several clients
///   reporting to one factory would overwrite each other's values: give each its own
///   ``dimensions`` (say `[("client", "tenant-a")]`).
///
/// Every metric also carries ``dimensions``, the caller's own labels.
///
/// Spans: one per federation (`federate` or `guest`, with `broker.session`,
/// `broker.provider` (the whole identifier), `broker.result`) and, inside it, one per request (`Service/Operation`,
/// kind client, with `rpc.system` `aws-api`, `rpc.service`, `rpc.method`,
/// `http.response.status_code`, `aws.request_id` when the header is shaped like AWS's,
/// `broker.attempt`). No metric or span
/// ever holds a token, key or credential.
public struct FederationInstrumentation: Sendable {
    /// Where metrics go; `nil` records none.
    public var metrics: (any MetricsFactory)?
    /// Where spans go; `nil` records none.
    public var tracer: (any Tracer)?
    /// Dimensions added to every metric this client records, after its own: what tells
    /// several clients in one process apart. Default: none. Keep their values few and
    /// fixed (a name per client, not per session or user).
    public var dimensions: [(String, String)]

    /// Metrics to `metrics`, spans to `tracer`; either may be `nil`. Every metric also
    /// carries `dimensions`.
    public init(metrics: (any MetricsFactory)? = nil, tracer: (any Tracer)? = nil, dimensions: [(String, String)] = []) {
        self.metrics = metrics
        self.tracer = tracer
        self.dimensions = dimensions
    }

    /// No metrics, no spans (the default).
    public static let none = FederationInstrumentation()

    /// The process-wide backends: `MetricsSystem.factory` and `InstrumentationSystem.tracer`.
    public static var global: FederationInstrumentation {
        FederationInstrumentation(metrics: MetricsSystem.factory, tracer: InstrumentationSystem.tracer)
    }

    var isEnabled: Bool { metrics != nil || tracer != nil }

    /// A metric's own dimensions followed by ``dimensions``.
    func dimensions(_ own: [(String, String)]) -> [(String, String)] { own + dimensions }
}
