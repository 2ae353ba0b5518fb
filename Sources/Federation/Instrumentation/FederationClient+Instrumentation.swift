#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CoreMetrics
import Tracing
import SecureStorage

/// The `identity_broker_sessions` gauges, one per state.
struct SessionGauges: Sendable {
    let factory: any MetricsFactory
    let instrumentation: FederationInstrumentation

    func record(_ state: SessionState, _ count: Int) {
        Gauge(label: "identity_broker_sessions", dimensions: instrumentation.dimensions([("state", "\(state)")]), factory: factory).record(count)
    }
}

extension FederationClient {
    /// Runs one federation inside its span (the parent of its requests' spans) and counts
    /// it by result and provider kind (`nil`: a guest), with its duration. Without
    /// instrumentation, just runs it.
    func instrumentedFederation(
        _ name: String,
        session: String,
        provider: AuthProvider?,
        _ body: () async throws(FederationError) -> FederationResult
    ) async throws(FederationError) -> FederationResult {
        guard instrumentation.isEnabled else { return try await body() }
        let start = ContinuousClock.now
        let span = instrumentation.tracer?.startSpan(name, ofKind: .internal)
        span?.attributes["broker.session"] = session
        span?.attributes["broker.provider"] = provider?.identifier ?? "guest"
        // The span's context is the current one while the federation runs, so request
        // spans (started in tasks that inherit it) become its children.
        let result: Result<FederationResult, FederationError> = await ServiceContext.$current.withValue(
            span?.context ?? ServiceContext.current,
            operation: {
                do throws(FederationError) {
                    return .success(try await body())
                } catch {
                    return .failure(error)
                }
            },
            isolation: self)
        let outcome: String
        switch result {
        case .success: outcome = "success"
        case .failure(let error):
            outcome = error.code.description
            span?.setStatus(SpanStatus(code: .error))
        }
        span?.attributes["broker.result"] = outcome
        span?.end()
        if let metrics = instrumentation.metrics {
            Counter(label: "identity_broker_federations_total", dimensions: instrumentation.dimensions([("result", outcome), ("provider", provider?.kind ?? "guest")]), factory: metrics)
                .increment()
            Timer(label: "identity_broker_federation_duration_seconds", dimensions: instrumentation.dimensions([("result", outcome)]), factory: metrics)
                .recordNanoseconds((ContinuousClock.now - start).wholeNanoseconds)
        }
        return try result.get()
    }
}
