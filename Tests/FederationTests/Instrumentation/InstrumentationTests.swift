import BrokerTestSupport
import CoreMetrics
@testable import Federation
import Foundation
import InMemoryTracing
import MetricsTestKit
import SecureStorage
import Tracing
import XCTest

/// Opt-in metrics (swift-metrics, checked with MetricsTestKit) and spans
/// (swift-distributed-tracing, checked with the in-memory tracer): what they count, how
/// spans nest, and that none of it ever holds a secret.
final class InstrumentationTests: XCTestCase {
    private let token = TestJWT.make(sub: "alice-sub", exp: testEpoch.addingTimeInterval(3600), iss: "https://accounts.google.com")

    private func client(
        _ instrumentation: FederationInstrumentation, fake: FakeCognito = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
    ) throws -> FederationClient {
        try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
            transport: fake.transport, keystore: InMemoryKeystore(), environment: [:], retryRunner: noSleepRunner(),
            now: { testEpoch }, logger: nil, instrumentation: instrumentation)
    }

    /// Labels keep a bounded set of values whatever callers pass or endpoints answer: a
    /// provider by its kind (not one series per OIDC issuer, SAML ARN or custom key), a status
    /// AWS does not use by its class.
    func testMetricLabelsStayBoundedWhateverCallersAndEndpointsSend() async throws {
        let metrics = TestMetrics()
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        let client = try client(FederationInstrumentation(metrics: metrics), fake: fake)
        for index in 0..<3 {
            try await client.federate(token: token, provider: .oidc(issuer: "issuer-\(index).example"), session: "o\(index)")
            try await client.federate(token: "opaque", provider: .custom(key: "key-\(index).example"), session: "c\(index)")
        }
        XCTAssertEqual(metrics.counterTotal(label: "identity_broker_federations_total", dimensions: [("result", "success"), ("provider", "oidc")]), 3)
        XCTAssertEqual(metrics.counterTotal(label: "identity_broker_federations_total", dimensions: [("result", "success"), ("provider", "custom")]), 3)
        fake.enqueue(.init(status: 418, body: []), for: .getId)
        await assertThrows(FederationError.self) { try await client.federate(token: self.token, provider: .google, session: "teapot") }
        XCTAssertEqual(
            metrics.counterTotal(label: "identity_broker_requests_total", dimensions: [("service", "CognitoIdentity"), ("operation", "GetId"), ("status", "4xx")]), 1)
        XCTAssertEqual(InstrumentedTransport.statusLabel(429), "429")
        XCTAssertEqual(InstrumentedTransport.statusLabel(999), "other")
    }

    /// A token refused before anything is sent (malformed, expired, empty) is counted too:
    /// among the commonest failures in production, it was invisible to the metrics.
    func testATokenRefusedLocallyIsCounted() async throws {
        let metrics = TestMetrics()
        let client = try client(FederationInstrumentation(metrics: metrics), fake: FakeCognito(expiration: testEpoch.addingTimeInterval(3600)))
        await assertThrows(FederationError.self, code: .invalidToken) { try await client.federate(token: "not.a.jwt", provider: .google, session: "a") }
        await assertThrows(FederationError.self, code: .invalidToken) { try await client.federate(token: "", provider: .facebook, session: "a") }
        XCTAssertEqual(metrics.counterTotal(label: "identity_broker_federations_total", dimensions: [("result", "invalidToken"), ("provider", "google")]), 1)
        XCTAssertEqual(metrics.counterTotal(label: "identity_broker_federations_total", dimensions: [("result", "invalidToken"), ("provider", "facebook")]), 1)
    }

    func testMetricsCountFederationsRequestsRetriesAndSessions() async throws {
        let metrics = TestMetrics()
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        let client = try client(FederationInstrumentation(metrics: metrics), fake: fake)
        try await client.federate(token: token, provider: .google, session: "alice")
        try await client.federateAsGuest(session: "visitor")
        fake.enqueue(.error("InternalErrorException", message: "boom", status: 500), for: .getCredentialsForIdentity)
        try await client.federate(token: token, provider: .google, session: "alice")
        fake.setDefault(.error("NotAuthorizedException", message: "no"), for: .getId)
        await assertThrows(FederationError.self, code: .notAuthorized) { try await client.federate(token: self.token, provider: .google, session: "bob") }

        XCTAssertEqual(metrics.counterTotal(label: "identity_broker_federations_total", dimensions: [("result", "success"), ("provider", "google")]), 2)
        XCTAssertEqual(metrics.counterTotal(label: "identity_broker_federations_total", dimensions: [("result", "success"), ("provider", "guest")]), 1)
        XCTAssertEqual(metrics.counterTotal(label: "identity_broker_federations_total", dimensions: [("result", "notAuthorized"), ("provider", "google")]), 1)
        XCTAssertEqual(
            metrics.counterTotal(label: "identity_broker_requests_total", dimensions: [("service", "CognitoIdentity"), ("operation", "GetCredentialsForIdentity"), ("status", "500")]), 1)
        XCTAssertEqual(
            metrics.counterTotal(label: "identity_broker_requests_total", dimensions: [("service", "CognitoIdentity"), ("operation", "GetId"), ("status", "400")]), 1)
        XCTAssertEqual(
            metrics.counterTotal(label: "identity_broker_retries_total", dimensions: [("service", "CognitoIdentity"), ("operation", "GetCredentialsForIdentity")]), 1)
        let durations = try metrics.expectTimer("identity_broker_federation_duration_seconds", [("result", "success")])
        XCTAssertEqual(durations.values.count, 3)
        let federated = try metrics.expectGauge("identity_broker_sessions", [("state", "federated")])
        XCTAssertEqual(federated.lastValue, 2, "alice and visitor are federated")

        try await client.clear(session: "alice")
        XCTAssertEqual(federated.lastValue, 1)
        assertNoSecret(in: metrics)
    }

    /// Two clients reporting to one factory, told apart by their own dimensions: each
    /// client's session gauge and counters are its own (without them the second client's
    /// gauge overwrote the first's).
    func testClientsSharingAFactoryKeepTheirOwnSeriesThroughTheirDimensions() async throws {
        let metrics = TestMetrics()
        let first = try client(FederationInstrumentation(metrics: metrics, dimensions: [("client", "first")]))
        let second = try client(FederationInstrumentation(metrics: metrics, dimensions: [("client", "second")]))
        try await first.federate(token: token, provider: .google, session: "alice")
        try await first.federate(token: token, provider: .google, session: "bob")
        try await second.federate(token: token, provider: .google, session: "carol")
        let firstSessions = try metrics.expectGauge("identity_broker_sessions", [("state", "federated"), ("client", "first")])
        let secondSessions = try metrics.expectGauge("identity_broker_sessions", [("state", "federated"), ("client", "second")])
        XCTAssertEqual(firstSessions.lastValue, 2)
        XCTAssertEqual(secondSessions.lastValue, 1)
        XCTAssertEqual(
            metrics.counterTotal(label: "identity_broker_federations_total", dimensions: [("result", "success"), ("provider", "google"), ("client", "first")]), 2)
        XCTAssertEqual(
            metrics.counterTotal(label: "identity_broker_requests_total", dimensions: [("service", "CognitoIdentity"), ("operation", "GetId"), ("status", "200"), ("client", "second")]), 1)
        let durations = try metrics.expectTimer("identity_broker_federation_duration_seconds", [("result", "success"), ("client", "second")])
        XCTAssertEqual(durations.values.count, 1)
    }

    func testSpansNestRequestsUnderTheirFederation() async throws {
        let tracer = InMemoryTracer()
        let client = try client(FederationInstrumentation(tracer: tracer))
        try await client.federate(token: token, provider: .google, session: "alice")
        let spans = tracer.finishedSpans
        let federation = try XCTUnwrap(spans.first { $0.operationName == "federate" })
        XCTAssertEqual(federation.attributes["broker.session"]?.toSpanAttribute(), .string("alice"))
        XCTAssertEqual(federation.attributes["broker.result"]?.toSpanAttribute(), .string("success"))
        let requests = spans.filter { $0.operationName.hasPrefix("CognitoIdentity/") }
        XCTAssertEqual(requests.map(\.operationName).sorted(), ["CognitoIdentity/GetCredentialsForIdentity", "CognitoIdentity/GetId"])
        for request in requests {
            XCTAssertEqual(request.parentSpanID, federation.spanID, "\(request.operationName) is a child of the federation")
            XCTAssertEqual(request.traceID, federation.traceID)
            XCTAssertEqual(request.kind, .client)
            XCTAssertEqual(request.attributes["rpc.system"]?.toSpanAttribute(), .string("aws-api"))
            XCTAssertEqual(request.attributes["rpc.service"]?.toSpanAttribute(), .string("CognitoIdentity"))
            XCTAssertEqual(request.attributes["http.response.status_code"]?.toSpanAttribute(), .int64(200))
        }
        for span in spans {
            var text = span.operationName
            span.attributes.forEach { key, value in text += " \(key)=\(value)" }
            XCTAssertNil(leakedRun(in: text, of: [token, FakeCognito.secretKey, FakeCognito.sessionToken]), text)
        }
    }

    /// The request ID comes from the endpoint, which may echo a token in it: only one shaped
    /// like AWS's is recorded.
    func testOnlyARequestIdShapedLikeAWSsIsRecorded() async throws {
        let tracer = InMemoryTracer()
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        var echoing = FakeCognito.Reply.identityId(FakeCognito.defaultIdentityId)
        echoing.headers.removeAll { $0.name.lowercased() == "x-amzn-requestid" }
        echoing.headers.append((name: "x-amzn-RequestId", value: token))
        fake.enqueue(echoing, for: .getId)
        var genuine = FakeCognito.Reply.credentials(identityId: FakeCognito.defaultIdentityId, expiration: testEpoch.addingTimeInterval(3600))
        genuine.headers.removeAll { $0.name.lowercased() == "x-amzn-requestid" }
        genuine.headers.append((name: "x-amzn-RequestId", value: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"))
        fake.enqueue(genuine, for: .getCredentialsForIdentity)
        let client = try client(FederationInstrumentation(tracer: tracer), fake: fake)
        try await client.federate(token: token, provider: .google, session: "alice")
        let spans = tracer.finishedSpans
        let getId = try XCTUnwrap(spans.first { $0.operationName == "CognitoIdentity/GetId" })
        XCTAssertNil(getId.attributes["aws.request_id"], "an echoed token was recorded as the request ID")
        let credentials = try XCTUnwrap(spans.first { $0.operationName == "CognitoIdentity/GetCredentialsForIdentity" })
        XCTAssertEqual(credentials.attributes["aws.request_id"]?.toSpanAttribute(), .string("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"))
        XCTAssertTrue(InstrumentedTransport.isRequestIdShaped("0123456789ABCDEF"), "S3's")

        // A hex custom token echoed as the request ID is request-ID-shaped: not recorded either.
        let hexToken = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        var echoingHex = FakeCognito.Reply.credentials(identityId: FakeCognito.defaultIdentityId, expiration: testEpoch.addingTimeInterval(3600))
        echoingHex.headers.removeAll { $0.name.lowercased() == "x-amzn-requestid" }
        echoingHex.headers.append((name: "x-amzn-RequestId", value: String(hexToken.uppercased().prefix(40))))
        fake.enqueue(echoingHex, for: .getCredentialsForIdentity)
        try await client.federate(token: hexToken, provider: .custom(key: "login.example"), session: "alice")
        let echoed = try XCTUnwrap(tracer.finishedSpans.last { $0.operationName == "CognitoIdentity/GetCredentialsForIdentity" })
        XCTAssertNil(echoed.attributes["aws.request_id"], "a hex token echoed as the request ID was recorded")
        XCTAssertFalse(InstrumentedTransport.isRequestIdShaped("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f"))
    }

    func testAFailedFederationSpanCarriesTheErrorCode() async throws {
        let tracer = InMemoryTracer()
        let fake = FakeCognito()
        fake.setDefault(.error("NotAuthorizedException", message: "Invalid login token \(token)"), for: .getId)
        let client = try client(FederationInstrumentation(tracer: tracer), fake: fake)
        await assertThrows(FederationError.self, code: .notAuthorized) { try await client.federate(token: self.token, provider: .google, session: "alice") }
        let federation = try XCTUnwrap(tracer.finishedSpans.first { $0.operationName == "federate" })
        XCTAssertEqual(federation.attributes["broker.result"]?.toSpanAttribute(), .string("notAuthorized"))
        XCTAssertEqual(federation.status?.code, .error)
        // The service echoed the token in its message: no span carries it, in any field.
        let getId = try XCTUnwrap(tracer.finishedSpans.first { $0.operationName == "CognitoIdentity/GetId" })
        XCTAssertEqual(getId.status?.code, .error)
        for span in tracer.finishedSpans {
            var text = span.operationName + " " + (span.status?.message ?? "")
            span.attributes.forEach { key, value in text += " \(key)=\(value)" }
            for event in span.events {
                text += " " + event.name
                event.attributes.forEach { key, value in text += " \(key)=\(value)" }
            }
            for recorded in span.errors { text += " \(recorded.error)" }
            XCTAssertNil(leakedRun(in: text, of: [token]), text)
        }
    }

    /// Off by default: the transport is not even wrapped.
    func testNothingIsRecordedByDefault() async throws {
        let fake = FakeCognito(expiration: testEpoch.addingTimeInterval(3600))
        let client = try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint),
            transport: fake.transport, keystore: InMemoryKeystore(), environment: [:], now: { testEpoch }, logger: nil)
        try await client.federate(token: token, provider: .google, session: "alice")
        // The public initializer's default too.
        let published = try FederationClient(configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint))
        for client in [client, published] {
            let enabled = await client.instrumentation.isEnabled
            XCTAssertFalse(enabled)
            let gauges = await client.sessionGauges
            XCTAssertNil(gauges)
            let wrapped = await client.wrapsItsTransport
            XCTAssertEqual(wrapped, false, "the transport is wrapped although nothing is recorded (nil: its outer layer changed)")
        }
    }

    private func assertNoSecret(in metrics: TestMetrics, line: UInt = #line) {
        var text = ""
        for counter in metrics.counters { text += counter.label + " " + counter.dimensions.map { "\($0)=\($1)" }.joined(separator: " ") + "\n" }
        XCTAssertNil(leakedRun(in: text, of: [token, FakeCognito.secretKey, FakeCognito.sessionToken]), text, line: line)
    }
}

extension FederationClient {
    /// Whether the transport under the shutdown signal is the instrumented one; `nil` when the
    /// layers are not what this test knows.
    fileprivate var wrapsItsTransport: Bool? {
        (cognito?.transport as? SignalledTransport).map { $0.base is InstrumentedTransport }
    }
}
