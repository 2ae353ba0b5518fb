@testable import CredentialServer
import XCTest

/// The environment a child gets from ``CredentialEndpoint/childEnvironment(from:removing:)``.
final class CredentialEndpointTests: XCTestCase {
    private let endpoint = CredentialEndpoint(
        session: "alice", url: "http://127.0.0.1:4000/credentials/alice", authorizationToken: CredentialServerToken.random())

    /// Spelled out here, not read from the type: a name dropped from its list, or a variable
    /// misspelt, must fail this test.
    func testTheEndpointReplacesEverySourceTheSDKsWouldReadFirst() {
        let sources = [
            "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CREDENTIAL_EXPIRATION",
            "AWS_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            "AWS_CREDENTIAL_FILE", "BOTO_CONFIG",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
        ]
        var base = Dictionary(uniqueKeysWithValues: sources.map { ($0, "planted") })
        base["AWS_REGION"] = "eu-west-1"
        let child = endpoint.childEnvironment(from: base)
        for name in sources.dropLast(2) {
            XCTAssertNil(child[name], "\(name) reached the child")
        }
        XCTAssertEqual(child["AWS_CONTAINER_CREDENTIALS_FULL_URI"], endpoint.url)
        XCTAssertEqual(child["AWS_CONTAINER_AUTHORIZATION_TOKEN"], endpoint.authorizationToken.value)
        XCTAssertEqual(child["AWS_EC2_METADATA_DISABLED"], "true")
        XCTAssertEqual(child["AWS_REGION"], "eu-west-1")
    }

    /// What opens the keystore opens every session in it: the child, which gets one session
    /// through the endpoint, never inherits it. The CLI's `exec` strips the same names.
    func testTheKeystoresKeyVariablesNeverReachTheChild() {
        let names = [
            "IDENTITY_BROKER_KEY", "IDENTITY_BROKER_PASSPHRASE", "IDENTITY_BROKER_KEY_FILE",
            // A key rotation's old (or next) key.
            "IDENTITY_BROKER_OTHER_KEY", "IDENTITY_BROKER_OTHER_PASSPHRASE", "IDENTITY_BROKER_OTHER_KEY_FILE",
        ]
        var base = ["HOME": "/home/a"]
        for name in names { base[name] = "secret-of-\(name)" }
        let child = endpoint.childEnvironment(from: base)
        for name in names {
            XCTAssertNil(child[name], "\(name) reached the child")
        }
        XCTAssertEqual(child["HOME"], "/home/a")
    }

    /// A keystore URL can carry the database password, and the caller's own key variables
    /// open the store: neither reaches the child. A keystore directory is no secret.
    func testAKeystoreURLAndTheCallersOwnSecretsNeverReachTheChild() {
        let base = [
            "IDENTITY_BROKER_KEYSTORE": "postgres://broker:s3cret@db.internal/identity",
            "MY_KEY": "custom-key", "MY_DATABASE_URL": "postgres://a:b@c/d", "HOME": "/home/a",
        ]
        let child = endpoint.childEnvironment(from: base, removing: ["MY_KEY", "MY_DATABASE_URL"])
        XCTAssertNil(child[CredentialEndpoint.keystoreLocationVariable], "the database password reached the child")
        XCTAssertNil(child["MY_KEY"])
        XCTAssertNil(child["MY_DATABASE_URL"])
        XCTAssertEqual(child["HOME"], "/home/a")
        let directory = endpoint.childEnvironment(from: ["IDENTITY_BROKER_KEYSTORE": "/var/lib/broker"])
        XCTAssertEqual(directory[CredentialEndpoint.keystoreLocationVariable], "/var/lib/broker")
        // Every spelling of a URL the CLI takes, and a URL anywhere in the value.
        for url in ["postgresql://broker:s3cret@db/identity", "POSTGRES://broker:s3cret@db/identity", "x://y", "/var/lib?u=postgres://a:b@c"] {
            let child = endpoint.childEnvironment(from: ["IDENTITY_BROKER_KEYSTORE": url])
            XCTAssertNil(child[CredentialEndpoint.keystoreLocationVariable], url)
        }
    }

    /// Every way of printing an endpoint shows its session and URL, never its token.
    func testAnEndpointPrintsWithoutItsToken() {
        var dumped = ""
        dump(endpoint, to: &dumped)
        for shown in [endpoint.description, endpoint.debugDescription, "\(endpoint)", String(reflecting: endpoint), dumped] {
            XCTAssertFalse(shown.contains(endpoint.authorizationToken.value), shown)
            XCTAssertTrue(shown.contains("alice"), shown)
        }
    }

    /// Java's and .NET's chains go on to the instance metadata service when the endpoint
    /// answers no credentials: it is off unless the caller decided otherwise.
    func testTheInstanceMetadataServiceIsOffUnlessTheCallerSaysOtherwise() {
        XCTAssertEqual(endpoint.childEnvironment(from: [:])[CredentialEndpoint.instanceMetadataDisabledVariable], "true")
        let chosen = [CredentialEndpoint.instanceMetadataDisabledVariable: "false"]
        XCTAssertEqual(endpoint.childEnvironment(from: chosen)[CredentialEndpoint.instanceMetadataDisabledVariable], "false")
        let empty = [CredentialEndpoint.instanceMetadataDisabledVariable: ""]
        XCTAssertEqual(endpoint.childEnvironment(from: empty)[CredentialEndpoint.instanceMetadataDisabledVariable], "true")
    }
}
