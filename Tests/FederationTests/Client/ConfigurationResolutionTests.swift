import BrokerTestSupport
@testable import Federation
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SecureStorage
import XCTest

/// Region and endpoint resolution.
final class ConfigurationResolutionTests: XCTestCase {
    private func endpoint(_ configuration: FederationConfiguration, _ environment: [String: String] = [:]) throws -> String {
        try configuration.resolvedEndpoint(environment: environment)
    }

    func testDefaults() {
        let configuration = FederationConfiguration(identityPoolId: testPoolId)
        XCTAssertEqual(configuration.expiryMargin, .seconds(120))
        XCTAssertNil(configuration.endpoint)
        XCTAssertNil(configuration.region)
        XCTAssertEqual(configuration.retry, .standard)
    }

    /// The certificate authority file: the configured one before `AWS_CA_BUNDLE`, none by
    /// default; a link to a PEM file is followed; a missing file, a directory, a FIFO (which
    /// would hold the client's creation while nobody writes it) or a file without a PEM
    /// certificate is `invalidConfiguration`, at once.
    func testTheCertificateAuthorityFileIsResolvedAndChecked() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ca-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
        try pem.write(toFile: directory + "/a.pem", atomically: true, encoding: .utf8)
        try pem.write(toFile: directory + "/b.pem", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: directory + "/link.pem", withDestinationPath: directory + "/a.pem")
        try "not a certificate\n".write(toFile: directory + "/text.pem", atomically: true, encoding: .utf8)
        XCTAssertEqual(mkfifo(directory + "/fifo.pem", 0o600), 0)

        let plain = FederationConfiguration(identityPoolId: testPoolId)
        XCTAssertNil(try plain.resolvedCertificateAuthorityFile(environment: [:]))
        XCTAssertNil(try plain.resolvedCertificateAuthorityFile(environment: ["AWS_CA_BUNDLE": ""]))
        XCTAssertEqual(try plain.resolvedCertificateAuthorityFile(environment: ["AWS_CA_BUNDLE": directory + "/b.pem"]), directory + "/b.pem")
        var configured = plain
        configured.certificateAuthorityFile = directory + "/link.pem"
        XCTAssertEqual(
            try configured.resolvedCertificateAuthorityFile(environment: ["AWS_CA_BUNDLE": directory + "/b.pem"]), directory + "/link.pem")
        for unusable in ["/missing.pem", "", "/fifo.pem", "/text.pem"] {
            XCTAssertThrowsError(try plain.resolvedCertificateAuthorityFile(environment: ["AWS_CA_BUNDLE": directory + unusable])) { error in
                XCTAssertEqual((error as? FederationError)?.code, .invalidConfiguration, unusable)
                XCTAssertTrue("\(error)".contains("AWS_CA_BUNDLE"), "\(error)")
            }
        }
    }

    func testRegionComesFromThePoolId() throws {
        XCTAssertEqual(try FederationConfiguration(identityPoolId: testPoolId).resolvedRegion(), "us-east-1")
        XCTAssertEqual(try FederationConfiguration(identityPoolId: "eu-west-2:abc").resolvedRegion(), "eu-west-2")
        XCTAssertEqual(try FederationConfiguration(identityPoolId: "us-gov-west-1:abc").resolvedRegion(), "us-gov-west-1")
        XCTAssertEqual(try FederationConfiguration(identityPoolId: testPoolId, region: "ap-south-1").resolvedRegion(), "ap-south-1")
    }

    func testDefaultEndpointIsTheRegionalCognitoIdentityEndpoint() throws {
        XCTAssertEqual(try endpoint(FederationConfiguration(identityPoolId: testPoolId)), "https://cognito-identity.us-east-1.amazonaws.com/")
        XCTAssertEqual(
            try endpoint(FederationConfiguration(identityPoolId: "eu-central-1:abc")), "https://cognito-identity.eu-central-1.amazonaws.com/")
        XCTAssertEqual(
            try endpoint(FederationConfiguration(identityPoolId: "cn-north-1:abc")), "https://cognito-identity.cn-north-1.amazonaws.com.cn/")
    }

    func testBadPoolIdIsAnInvalidConfiguration() async throws {
        let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln"
        for (poolId, region) in [
            ("", nil), ("nonsense", nil), ("us-east-1", nil), (":abc", nil), ("us-east-1:", nil), ("US-EAST-1:abc", nil), ("useast1:abc", nil),
            ("us-east-x:abc", nil), ("us-east-1:not-a-guid", nil), ("us-east-1:abc ", nil), ("us-east-1:\(jwt)", nil),
            ("us-east-1:ABC", nil), ("us-east-1:" + String(repeating: "a", count: 50), nil),
            // The region given apart does not excuse the pool ID's shape.
            ("12345", "us-east-1"), ("", "us-east-1"), ("us-east-1:not-a-guid", "us-east-1"),
        ] as [(String, String?)] {
            let configuration = FederationConfiguration(identityPoolId: poolId, region: region)
            let error = assertThrows(FederationError.self, code: .invalidConfiguration) {
                try FederationClient(
                    configuration: configuration, transport: FakeCognito().transport, keystore: InMemoryKeystore(), environment: [:],
                    now: { testEpoch }, logger: nil)
            }
            XCTAssertNotNil(error, poolId)
        }
    }

    func testBadRegionIsAnInvalidConfiguration() {
        assertThrows(FederationError.self, code: .invalidConfiguration) {
            try FederationConfiguration(identityPoolId: testPoolId, region: "Mars").resolvedEndpoint(environment: [:])
        }
    }

    /// The initializer documents `invalidConfiguration` for an unusable pool ID, whatever the endpoint.
    func testBadPoolIdIsRejectedEvenWithAnExplicitEndpoint() async {
        let configuration = FederationConfiguration(identityPoolId: "nonsense", endpoint: "http://127.0.0.1:5000/")
        assertThrows(FederationError.self, code: .invalidConfiguration) {
            try FederationClient(
                configuration: configuration, transport: FakeCognito().transport, keystore: InMemoryKeystore(), environment: [:],
                now: { testEpoch }, logger: nil)
        }
    }

    /// A negative expiry margin would show credentials as valid after they expired: refused by
    /// a federating client, counted as zero by a reading one.
    func testANegativeExpiryMarginIsRefusedOrCountsAsZero() async throws {
        var configuration = FederationConfiguration(identityPoolId: testPoolId, endpoint: "http://127.0.0.1:5000/")
        configuration.expiryMargin = .seconds(-600)
        assertThrows(FederationError.self, code: .invalidConfiguration) {
            try FederationClient(
                configuration: configuration, transport: FakeCognito().transport, keystore: InMemoryKeystore(), environment: [:],
                now: { testEpoch }, logger: nil)
        }
        let keystore = InMemoryKeystore()
        let writer = try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: "http://127.0.0.1:5000/"),
            transport: FakeCognito(expiration: Date().addingTimeInterval(1)).transport, keystore: keystore, environment: [:],
            now: { Date() }, logger: nil)
        try await writer.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        try await Task.sleep(for: .milliseconds(1100))
        let reader = FederationClient(keystore: keystore, expiryMargin: .seconds(-600))
        let state = try await reader.session("alice").state
        XCTAssertEqual(state, .expired, "credentials read as valid after they expired")
    }

    /// A timeout or response cap of zero would fail every call (zero is "no limit" in curl
    /// and URLSession, not here): refused when the client is made.
    func testTimeoutsAndResponseCapsNoClientCanUseAreRefused() {
        let cases: [(String, (inout FederationConfiguration) -> Void)] = [
            ("connect timeout", { $0.connectTimeout = .zero }), ("request timeout", { $0.requestTimeout = .seconds(-1) }),
            ("federation timeout", { $0.federationTimeout = .zero }), ("response body", { $0.maxResponseBytes = 0 }),
        ]
        for (name, change) in cases {
            var configuration = FederationConfiguration(identityPoolId: testPoolId, endpoint: "http://127.0.0.1:5000/")
            change(&configuration)
            let error = assertThrows(FederationError.self, code: .invalidConfiguration) {
                try FederationClient(
                    configuration: configuration, transport: FakeCognito().transport, keystore: InMemoryKeystore(), environment: [:],
                    now: { testEpoch }, logger: nil)
            }
            XCTAssertTrue(error?.message.contains(name) ?? false, "\(name): \(String(describing: error))")
        }
    }

    /// A renewal postponement of zero would remind a handler that always postpones at once,
    /// again and again; a negative lead time means nothing. Both are refused; a zero lead
    /// time (no reminders) is not.
    func testRenewalDurationsNoClientCanUseAreRefused() throws {
        for (lead, postponement) in [(Duration.seconds(-1), Duration.seconds(600)), (.seconds(300), .zero), (.seconds(300), .seconds(-5))] {
            var configuration = FederationConfiguration(identityPoolId: testPoolId, endpoint: "http://127.0.0.1:5000/")
            configuration.renewalLeadTime = lead
            configuration.renewalPostponement = postponement
            let error = assertThrows(FederationError.self, code: .invalidConfiguration) {
                try FederationClient(
                    configuration: configuration, transport: FakeCognito().transport, keystore: InMemoryKeystore(), environment: [:],
                    now: { testEpoch }, logger: nil)
            }
            XCTAssertTrue(error?.message.contains("renewal") ?? false, "\(lead), \(postponement): \(String(describing: error))")
        }
        var off = FederationConfiguration(identityPoolId: testPoolId, endpoint: "http://127.0.0.1:5000/")
        off.renewalLeadTime = .zero
        XCTAssertNoThrow(try FederationClient(
            configuration: off, transport: FakeCognito().transport, keystore: InMemoryKeystore(), environment: [:], now: { testEpoch }, logger: nil))
    }

    func testEndpointPrecedence() throws {
        let environment = [
            "AWS_ENDPOINT_URL_COGNITO_IDENTITY": "https://service-specific.test/",
            "AWS_ENDPOINT_URL": "https://global.test/",
        ]
        let explicit = FederationConfiguration(identityPoolId: testPoolId, endpoint: "https://explicit.test/")
        let implicit = FederationConfiguration(identityPoolId: testPoolId)
        XCTAssertEqual(try endpoint(explicit, environment), "https://explicit.test/")
        XCTAssertEqual(try endpoint(implicit, environment), "https://service-specific.test/")
        XCTAssertEqual(try endpoint(implicit, ["AWS_ENDPOINT_URL": "https://global.test/"]), "https://global.test/")
        XCTAssertEqual(
            try endpoint(implicit, ["AWS_ENDPOINT_URL_COGNITO_IDENTITY": "", "AWS_ENDPOINT_URL": "https://global.test/"]), "https://global.test/",
            "an empty variable counts as unset")
        XCTAssertEqual(try endpoint(implicit, ["AWS_ENDPOINT_URL_S3": "https://s3.test/"]), "https://cognito-identity.us-east-1.amazonaws.com/")
    }

    /// An empty configured endpoint is an unset variable passed on, not "use the default":
    /// falling back would send the tokens to AWS's own endpoint instead of the one meant.
    /// The explicit STS endpoint is checked when the client is created, as the endpoint is.
    func testAnEmptyOrBadConfiguredEndpointFailsWhenTheClientIsCreated() {
        let environment = ["AWS_ENDPOINT_URL": "https://global.test/"]
        for configure in [{ (c: inout FederationConfiguration) in c.endpoint = "" }, { $0.stsEndpoint = "" }, { $0.stsEndpoint = "ftp://x/" }] {
            var configuration = FederationConfiguration(identityPoolId: testPoolId)
            configure(&configuration)
            let error = assertThrows(FederationError.self, code: .invalidConfiguration) {
                _ = try FederationClient(
                    configuration: configuration, transport: FakeCognito().transport, keystore: InMemoryKeystore(),
                    environment: environment, now: { testEpoch }, logger: nil)
            }
            XCTAssertTrue(error?.message.contains("configured") == true, "\(String(describing: error))")
        }
        // A bad STS variable is left to the classic flow that would use it.
        XCTAssertNoThrow(try FederationClient(
            configuration: FederationConfiguration(identityPoolId: testPoolId), transport: FakeCognito().transport,
            keystore: InMemoryKeystore(), environment: ["AWS_ENDPOINT_URL_STS": "ftp://x/"], now: { testEpoch }, logger: nil))
    }

    func testEndpointThatIsNotHTTPIsAnInvalidConfiguration() {
        assertThrows(FederationError.self, code: .invalidConfiguration) {
            try endpoint(FederationConfiguration(identityPoolId: testPoolId, endpoint: "ftp://x/"))
        }
        assertThrows(FederationError.self, code: .invalidConfiguration) {
            try endpoint(FederationConfiguration(identityPoolId: testPoolId), ["AWS_ENDPOINT_URL": "localhost:5000"])
        }
    }

    func testTheClientSendsToTheResolvedEndpoint() async throws {
        for (configured, environment, expected) in [
            ("https://explicit.test/", ["AWS_ENDPOINT_URL_COGNITO_IDENTITY": "https://env.test/"], "https://explicit.test/"),
            (nil, ["AWS_ENDPOINT_URL_COGNITO_IDENTITY": "https://env.test/", "AWS_ENDPOINT_URL": "https://global.test/"], "https://env.test/"),
            (nil, ["AWS_ENDPOINT_URL": "https://global.test/"], "https://global.test/"),
            (nil, [:], "https://cognito-identity.us-east-1.amazonaws.com/"),
        ] as [(String?, [String: String], String)] {
            let harness = try Harness(configure: { $0.endpoint = configured }, environment: environment)
            try await harness.client.federate(token: "opaque", provider: .facebook)
            XCTAssertEqual(Set(harness.fake.calls.map(\.url)), [expected])
        }
    }

    // MARK: Plaintext endpoints

    func testPlaintextIsAcceptedForLoopbackHostsOnly() throws {
        // 2130706433 is 127.0.0.1 written as one number: libcurl, which connects, reads it so.
        for url in [
            "http://127.0.0.1:5000/", "http://127.1.2.3/", "http://localhost:9/", "http://LOCALHOST/", "http://[::1]:8080/", "http://2130706433/",
            "http://[0:0:0:0:0:0:0:1]/", "http://[::ffff:127.0.0.1]:5000/",
        ] {
            XCTAssertEqual(try endpoint(FederationConfiguration(identityPoolId: testPoolId, endpoint: url)), url)
        }
        for url in [
            "http://cognito.example/", "http://10.0.0.5/", "http://128.0.0.1/", "http://127.0.0.1.attacker.example/",
            "http://127.0.0.1@attacker.example/", "http://localhost.attacker.example/", "http://[::2]/", "http://2130706434.example/",
            "http://[::ffff:10.0.0.5]/", "http://[::127.0.0.1]/",
        ] {
            let error = assertThrows(FederationError.self, code: .invalidConfiguration) {
                try endpoint(FederationConfiguration(identityPoolId: testPoolId, endpoint: url))
            }
            XCTAssertTrue(error?.message.contains("allowInsecureEndpoint") == true, "\(url): \(error?.message ?? "accepted")")
        }
    }

    func testPlaintextFromTheEnvironmentIsCheckedToo() {
        for variable in ["AWS_ENDPOINT_URL_COGNITO_IDENTITY", "AWS_ENDPOINT_URL"] {
            let error = assertThrows(FederationError.self, code: .invalidConfiguration) {
                try endpoint(FederationConfiguration(identityPoolId: testPoolId), [variable: "http://cognito.example/"])
            }
            XCTAssertTrue(error?.message.contains(variable) == true, error?.message ?? "accepted")
        }
    }

    /// A user name and password in an endpoint URL (a proxy's, say) never reach the error
    /// message that quotes the URL, whichever check refuses it.
    func testAnEndpointsUserInformationIsNeverQuoted() {
        let secret = "S3cretProxyPassw0rd"
        for url in [
            "http://svc:\(secret)@proxy.corp:8080/", "ftp://svc:\(secret)@proxy.corp/", "svc:\(secret)@proxy.corp",
            "http://svc:\(secret)/x@proxy.corp/", "http://\(secret)@@proxy.corp/", "http://svc:\(secret)@\u{301}proxy.corp/",
        ] {
            let error = assertThrows(FederationError.self, code: .invalidConfiguration) {
                try endpoint(FederationConfiguration(identityPoolId: testPoolId), ["AWS_ENDPOINT_URL": url])
            }
            let shown = error.map { "\($0)" }
            XCTAssertNotNil(shown, url)
            XCTAssertNil(leakedRun(in: shown ?? "", of: [secret, "S3cret"]), "\(url): \(shown ?? "accepted")")
            XCTAssertTrue(error?.message.contains("proxy.corp") ?? false, "the host is still named: \(error?.message ?? "")")
        }
        XCTAssertEqual(EndpointRule.preview("http://a:b@host/p"), "http://…@host/p")
        XCTAssertEqual(EndpointRule.preview("http://host/p"), "http://host/p")
    }

    func testTheOptInAllowsPlaintextToAnyHost() throws {
        var configuration = FederationConfiguration(identityPoolId: testPoolId, endpoint: "http://cognito-emulator:9229/")
        configuration.allowInsecureEndpoint = true
        XCTAssertEqual(try endpoint(configuration), "http://cognito-emulator:9229/")
        XCTAssertFalse(FederationConfiguration(identityPoolId: testPoolId).allowInsecureEndpoint, "off by default")
    }

    /// Nothing is sent when the endpoint is refused: the client cannot even be created.
    func testAClientWithAPlaintextRemoteEndpointSendsNothing() async throws {
        let fake = FakeCognito()
        assertThrows(FederationError.self, code: .invalidConfiguration) {
            try FederationClient(
                configuration: FederationConfiguration(identityPoolId: testPoolId, endpoint: "http://cognito.example/"),
                transport: fake.transport, keystore: InMemoryKeystore(), environment: [:], now: { testEpoch }, logger: nil)
        }
        XCTAssertTrue(fake.calls.isEmpty)
    }
}
