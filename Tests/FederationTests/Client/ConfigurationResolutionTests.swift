import BrokerTestSupport
@testable import Federation
import Foundation
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
        for poolId in ["", "nonsense", "us-east-1", ":abc", "us-east-1:", "US-EAST-1:abc", "useast1:abc", "us-east-x:abc"] {
            let configuration = FederationConfiguration(identityPoolId: poolId)
            let error = await expectFederationError(.invalidConfiguration) {
                try FederationClient(
                    configuration: configuration, transport: FakeCognito().transport, persistence: nil, environment: [:],
                    now: { testEpoch }, logger: nil)
            }
            XCTAssertNotNil(error, poolId)
        }
    }

    func testBadRegionIsAnInvalidConfiguration() {
        XCTAssertThrowsError(try FederationConfiguration(identityPoolId: testPoolId, region: "Mars").resolvedEndpoint(environment: [:]))
    }

    /// The initializer documents `invalidConfiguration` for an unusable pool ID, whatever the endpoint.
    func testBadPoolIdIsRejectedEvenWithAnExplicitEndpoint() async {
        let configuration = FederationConfiguration(identityPoolId: "nonsense", endpoint: "http://127.0.0.1:5000/")
        await expectFederationError(.invalidConfiguration) {
            try FederationClient(
                configuration: configuration, transport: FakeCognito().transport, persistence: nil, environment: [:],
                now: { testEpoch }, logger: nil)
        }
    }

    func testEndpointPrecedence() throws {
        let environment = [
            "AWS_ENDPOINT_URL_COGNITO_IDENTITY": "http://service-specific.test/",
            "AWS_ENDPOINT_URL": "http://global.test/",
        ]
        let explicit = FederationConfiguration(identityPoolId: testPoolId, endpoint: "http://explicit.test/")
        let implicit = FederationConfiguration(identityPoolId: testPoolId)
        XCTAssertEqual(try endpoint(explicit, environment), "http://explicit.test/")
        XCTAssertEqual(try endpoint(implicit, environment), "http://service-specific.test/")
        XCTAssertEqual(try endpoint(implicit, ["AWS_ENDPOINT_URL": "http://global.test/"]), "http://global.test/")
        XCTAssertEqual(
            try endpoint(implicit, ["AWS_ENDPOINT_URL_COGNITO_IDENTITY": "", "AWS_ENDPOINT_URL": "http://global.test/"]), "http://global.test/",
            "an empty variable counts as unset")
        XCTAssertEqual(try endpoint(implicit, ["AWS_ENDPOINT_URL_S3": "http://s3.test/"]), "https://cognito-identity.us-east-1.amazonaws.com/")
    }

    func testEndpointThatIsNotHTTPIsAnInvalidConfiguration() {
        XCTAssertThrowsError(try endpoint(FederationConfiguration(identityPoolId: testPoolId, endpoint: "ftp://x/")))
        XCTAssertThrowsError(try endpoint(FederationConfiguration(identityPoolId: testPoolId), ["AWS_ENDPOINT_URL": "localhost:5000"]))
    }

    func testTheClientSendsToTheResolvedEndpoint() async throws {
        for (configured, environment, expected) in [
            ("http://explicit.test/", ["AWS_ENDPOINT_URL_COGNITO_IDENTITY": "http://env.test/"], "http://explicit.test/"),
            (nil, ["AWS_ENDPOINT_URL_COGNITO_IDENTITY": "http://env.test/", "AWS_ENDPOINT_URL": "http://global.test/"], "http://env.test/"),
            (nil, ["AWS_ENDPOINT_URL": "http://global.test/"], "http://global.test/"),
            (nil, [:], "https://cognito-identity.us-east-1.amazonaws.com/"),
        ] as [(String?, [String: String], String)] {
            let harness = try Harness(configure: { $0.endpoint = configured }, environment: environment)
            try await harness.client.federate(token: "opaque", provider: .facebook)
            XCTAssertEqual(Set(harness.fake.calls.map(\.url)), [expected])
        }
    }
}
