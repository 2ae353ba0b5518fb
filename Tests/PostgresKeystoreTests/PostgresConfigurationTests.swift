import BrokerTestSupport
import Foundation
@testable import PostgresKeystore
import PostgresNIO
import SecureStorage
import XCTest

/// URL parsing and the password's absence from every description (no server needed).
final class PostgresConfigurationTests: XCTestCase {
    /// Values with which every call would fail are refused before anything connects, by
    /// every entry point, with the value named (a port of 0 used to surface as NIO's error,
    /// a zero operation timeout as a timeout on every call).
    func testValuesNoKeystoreCanUseAreRefusedBeforeConnecting() async throws {
        let cases: [(String, (inout PostgresKeystore.Configuration) -> Void)] = [
            ("host is empty", { $0.host = "" }),
            ("port 0 is not within 1–65535", { $0.port = 0 }),
            ("port 65536 is not within 1–65535", { $0.port = 65_536 }),
            ("username is empty", { $0.username = "" }),
            ("connectTimeout is not positive", { $0.connectTimeout = .zero }),
            ("operationTimeout is not positive", { $0.operationTimeout = .seconds(-1) }),
            ("reconnectDelay is not positive", { $0.reconnectDelay = .zero }),
            ("keepAliveInterval is not positive", { $0.keepAliveInterval = .zero }),
        ]
        let key = KeySource.raw(Array(repeating: 7, count: 32))
        for (problem, change) in cases {
            // A closed loopback port: anything that tried to connect would fail otherwise.
            var configuration = PostgresKeystore.Configuration(host: "127.0.0.1", port: 9, username: "broker", password: "pw-\(UUID())")
            change(&configuration)
            let calls: [(String, () async throws(KeystoreError) -> Void)] = [
                ("init", { () async throws(KeystoreError) in _ = try await PostgresKeystore(configuration: configuration, service: "tool", keySource: key) }),
                ("openAndRead", { () async throws(KeystoreError) in _ = try await PostgresKeystore.openAndRead(key: "k", configuration: configuration, service: "tool", keySource: key) }),
                ("migrate", { () async throws(KeystoreError) in _ = try await PostgresKeystore.migrate(configuration: configuration, service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: key) }),
                ("rekey", { () async throws(KeystoreError) in _ = try await PostgresKeystore.rekey(configuration: configuration, service: "tool", group: .none, keySource: key) }),
            ]
            for (name, call) in calls {
                let error = await assertThrows(KeystoreError.self, code: .invalidConfiguration) { try await call() }
                XCTAssertTrue(error?.reason.contains(problem) ?? false, "\(name): \(String(describing: error))")
                XCTAssertFalse(error?.description.contains(configuration.password!) ?? true, "\(name)")
            }
        }
    }

    /// The pooled connections' `search_path` goes into their set-up statement as an escape
    /// string, read the same whatever `standard_conforming_strings` says: a schema name with a
    /// backslash or a quote (which the open checked) can neither be misread nor end it.
    func testTheSearchPathIsWrittenAsAnEscapeString() {
        XCTAssertEqual(ConnectionSetup.literal("\"Fleet Ops\""), "E'\"Fleet Ops\"'")
        XCTAssertEqual(ConnectionSetup.literal("\"a\\'b\""), "E'\"a\\\\''b\"'")
        let statement = ConnectionSetup.statement(statementTimeoutMilliseconds: 1000, defaults: [("search_path", ConnectionSetup.literal("x'y"))])
        XCTAssertTrue(statement.contains("('search_path', E'x''y'::text)"), statement)
    }

    func testParsesEveryPartWithPercentDecoding() throws {
        let configuration = try PostgresKeystore.Configuration(
            url: "postgres://broker%2Badmin:p%40ss%3Aw%2Frd@db.example.com:6543/identity%20db?sslmode=verify-full&sslrootcert=/etc/ca.pem&connect_timeout=7")
        XCTAssertEqual(configuration.username, "broker+admin")
        XCTAssertEqual(configuration.password, "p@ss:w/rd")
        XCTAssertEqual(configuration.host, "db.example.com")
        XCTAssertEqual(configuration.port, 6543)
        XCTAssertEqual(configuration.database, "identity db")
        XCTAssertEqual(configuration.tls, .verifyFull)
        XCTAssertEqual(configuration.rootCertificatePath, "/etc/ca.pem")
        XCTAssertEqual(configuration.connectTimeout, .seconds(7))
        XCTAssertEqual(configuration.endpoint, "db.example.com:6543")
    }

    func testDefaultsAndVariants() throws {
        let minimal = try PostgresKeystore.Configuration(url: "postgresql://broker@localhost")
        XCTAssertEqual(minimal.port, 5432)
        XCTAssertNil(minimal.password)
        XCTAssertNil(minimal.database)
        XCTAssertEqual(minimal.tls, .disable)
        XCTAssertEqual(minimal.maximumConnections, 8)
        XCTAssertEqual(minimal.operationTimeout, .seconds(10))
        XCTAssertNil(minimal.keepAliveInterval, "no keep-alive timer around every operation unless asked for")

        let ipv6 = try PostgresKeystore.Configuration(url: "postgres://u:pw@[::1]:5433/db?sslmode=require")
        XCTAssertEqual(ipv6.host, "::1")
        XCTAssertEqual(ipv6.port, 5433)
        XCTAssertEqual(ipv6.endpoint, "[::1]:5433")
        XCTAssertEqual(ipv6.tls, .require)

        // An unescaped '@' in the password: the host starts after the last '@'.
        let at = try PostgresKeystore.Configuration(url: "postgres://u:a@b@host/db")
        XCTAssertEqual(at.password, "a@b")
        XCTAssertEqual(at.host, "host")

        for (mode, expected) in [("disable", PostgresKeystore.TLSMode.disable), ("allow", .prefer), ("prefer", .prefer), ("verify-ca", .verifyCA)] {
            XCTAssertEqual(try PostgresKeystore.Configuration(url: "postgres://u@h/d?sslmode=\(mode)").tls, expected)
        }

        // As libpq: `require` checks nothing, unless given a root certificate file; then the chain.
        let require = try PostgresKeystore.Configuration(url: "postgres://u@h/d?sslmode=require")
        XCTAssertEqual(PostgresKeystore.tlsSettings(require)?.certificateVerification, CertificateVerification.none)
        let requireWithRoots = try PostgresKeystore.Configuration(url: "postgres://u@h/d?sslmode=require&sslrootcert=/etc/ca.pem")
        XCTAssertEqual(PostgresKeystore.tlsSettings(requireWithRoots)?.certificateVerification, .noHostnameVerification)
        let full = try PostgresKeystore.Configuration(url: "postgres://u@h/d?sslmode=verify-full")
        XCTAssertEqual(PostgresKeystore.tlsSettings(full)?.certificateVerification, .fullVerification)
    }

    /// A configuration that says nothing of TLS never sends the password across a network in
    /// plaintext: another machine gets `verify-full`; this one, where nothing leaves it,
    /// plain TCP. An explicit choice is kept either way.
    func testTLSDefaultsToVerifyFullUnlessTheServerIsThisMachine() throws {
        // Spellings the resolver does not read as 127.x: octal, a sign, a host name to look up.
        for host in ["db.internal", "10.0.0.5", "::ffff:10.0.0.1", "127.1", "0127.0.0.1", "127.0.0.+1", "127.0.0.08", "localhost.evil"] {
            XCTAssertEqual(PostgresKeystore.Configuration(host: host, username: "u").tls, .verifyFull, host)
        }
        for url in ["postgres://u@db.internal/x", "postgres://u@[2001:db8::1]:5432/x", "postgres://u:p@10.1.2.3/x?connect_timeout=3"] {
            let configuration = try PostgresKeystore.Configuration(url: url)
            XCTAssertEqual(configuration.tls, .verifyFull, url)
            XCTAssertNil(configuration.unprotectedTransportWarning, url)
            XCTAssertEqual(PostgresKeystore.tlsSettings(configuration)?.certificateVerification, .fullVerification, url)
        }
        for host in ["localhost", "127.0.0.1", "127.0.0.2", "::1"] {
            XCTAssertEqual(PostgresKeystore.Configuration(host: host, username: "u").tls, .disable, host)
        }
        XCTAssertEqual(try PostgresKeystore.Configuration(url: "postgres://u@localhost/x").tls, .disable)
        XCTAssertEqual(PostgresKeystore.Configuration(host: "db.internal", username: "u", tls: .disable).tls, .disable)
        XCTAssertEqual(try PostgresKeystore.Configuration(url: "postgres://u@db.internal/x?sslmode=require").tls, .require)
        XCTAssertEqual(PostgresKeystore.Configuration(host: "localhost", username: "u", tls: .verifyCA).tls, .verifyCA)

        // The default follows the host: a configuration made for this machine and pointed
        // elsewhere verifies; an explicit choice stays.
        var moved = PostgresKeystore.Configuration(host: "localhost", username: "u")
        moved.host = "db.internal"
        XCTAssertEqual(moved.tls, .verifyFull)
        XCTAssertNil(moved.unprotectedTransportWarning)
        var chosen = try PostgresKeystore.Configuration(url: "postgres://u@localhost/x?sslmode=disable")
        chosen.host = "db.internal"
        XCTAssertEqual(chosen.tls, .disable)
        XCTAssertNotNil(chosen.unprotectedTransportWarning)
    }

    func testThePoolRunsKeepAliveQueriesOnlyWithAnInterval() {
        var configuration = PostgresKeystore.Configuration(host: "127.0.0.1", username: "broker")
        XCTAssertNil(PostgresKeystore.clientConfiguration(configuration).options.keepAliveBehavior)
        configuration.keepAliveInterval = .seconds(45)
        XCTAssertEqual(PostgresKeystore.clientConfiguration(configuration).options.keepAliveBehavior?.frequency, .seconds(45))
    }

    func testRejectsMalformedURLsWithoutEchoingThePassword() {
        let secret = "hunter2-very-secret"
        let bad = [
            "mysql://u:\(secret)@h/d",
            "postgres://:\(secret)@h/d",
            "postgres://u:\(secret)@h:99999/d",
            "postgres://u:\(secret)@h:port/d",
            "postgres://u:\(secret)@/d",
            "postgres://u:\(secret)@h/d?sslmode=requir",
            "postgres://u:\(secret)@h/d?sslcert=x",
            "postgres://u:\(secret)%zz@h/d",
            "postgres://u:\(secret)@[::1/d",
            "postgres://u:\(secret)@::1/d",
            "postgres://u:\(secret)@fe80::1:5432/d",
            "postgres://u:\(secret)@h/d/extra",
        ]
        for url in bad {
            do {
                _ = try PostgresKeystore.Configuration(url: url)
                XCTFail("accepted \(url)")
            } catch {
                XCTAssertNil(leakedRun(in: "\(error)", of: [secret, "hunter2"]), "\(error)")
            }
        }
    }

    /// A '/' or '?' left unescaped in a password ends the host early: refused, and nothing of
    /// the password is printed as a database name, a parameter name or a host.
    func testAnAtSignAfterTheHostIsRefusedWithoutQuotingAnything() {
        let cases = [
            "postgres://alice:p@ss?W0rdS3cretLongPart=1@127.0.0.1:55432/db",
            "postgres://alice:p@ss/S3cretPassw0rdXYZ@localhost:55432",
            "postgres://alice:pa/ss?S3cretPassw0rdXYZ@localhost/db",
            "postgres://alice:pw@host/db?sslrootcert=/home/a@b/ca.pem",
        ]
        for url in cases {
            XCTAssertThrowsError(try PostgresKeystore.Configuration(url: url), url) { error in
                let text = "\(error)"
                XCTAssertTrue(text.contains("'@' after its host"), text)
                for fragment in ["S3cret", "W0rd", "p@ss", "pa/ss", "ca.pem", "localhost", "127.0.0.1"] {
                    XCTAssertFalse(text.contains(fragment), "\(fragment) in: \(text)")
                }
            }
        }
        // Percent-encoded, the same passwords are read whole.
        let encoded = try? PostgresKeystore.Configuration(url: "postgres://alice:p%40ss%2FS3cret%3FXYZ@localhost:55432/db")
        XCTAssertEqual(encoded?.password, "p@ss/S3cret?XYZ")
        XCTAssertEqual(encoded?.host, "localhost")
        XCTAssertEqual(encoded?.database, "db")
    }

    /// A failure's text loses any 16 characters of the password and a shorter password whole,
    /// but a password of one to three characters is not replaced letter by letter (which would
    /// spell it out).
    func testConnectionErrorsLoseThePasswordWithoutSpellingOutAShortOne() throws {
        struct Echo: Error, CustomStringConvertible { let description: String }
        let long = try PostgresKeystore.Configuration(url: "postgres://alice:LongPassw0rd-0123456789@db/identity")
        let fragment = KeystoreError.postgres(Echo(description: "auth for 'Passw0rd-0123456789' refused"), operation: "connect", configuration: long)
        XCTAssertFalse("\(fragment)".contains("0123456789"), "\(fragment)")
        let short = try PostgresKeystore.Configuration(url: "postgres://alice:e@server/identity")
        let error = KeystoreError.postgres(Echo(description: "server error on connection"), operation: "connect", configuration: short)
        XCTAssertTrue("\(error)".contains("server error on connection"), "\(error)")
        XCTAssertFalse("\(error)".contains("<redacted>"), "\(error)")
    }

    /// A server older than PostgreSQL 12 (no `WITH … AS MATERIALIZED`, which the commit
    /// uses) is named at a connection's set-up, as `io`, instead of failing the commit
    /// procedure's creation with a syntax error; a standby is refused as one. (The decision
    /// on the set-up statement's answer: no older server is at hand, and
    /// `server_version_num` cannot be set.)
    func testAServerOlderThanTheOldestSupportedIsNamed() throws {
        XCTAssertTrue(ConnectionSetup.refusal(standby: false, version: 110_022) is UnsupportedServer)
        XCTAssertTrue(ConnectionSetup.refusal(standby: false, version: 119_999) is UnsupportedServer)
        XCTAssertTrue(ConnectionSetup.refusal(standby: true, version: 119_999) is UnsupportedServer, "an old standby is named for its age")
        XCTAssertNil(ConnectionSetup.refusal(standby: false, version: 120_000))
        XCTAssertNil(ConnectionSetup.refusal(standby: false, version: 170_002))
        XCTAssertTrue(ConnectionSetup.refusal(standby: true, version: 150_010) is StandbyServer)
        let configuration = try PostgresKeystore.Configuration(url: "postgres://alice@db/identity")
        let refusal = try XCTUnwrap(ConnectionSetup.refusal(standby: false, version: 110_022))
        let error = KeystoreError.postgres(refusal, operation: "opening", configuration: configuration)
        XCTAssertEqual(error.code, .io)
        XCTAssertTrue(error.reason.contains("PostgreSQL 11 (server_version_num 110022); the keystore needs PostgreSQL 12 or later"), "\(error)")
    }

    func testThePasswordIsInNoDescriptionNorMirror() throws {
        let configuration = try PostgresKeystore.Configuration(url: "postgres://broker:Sup3rS3cretPassw0rd@db:5432/identity?sslmode=verify-full")
        XCTAssertEqual(configuration.description, "postgres://broker@db:5432/identity?sslmode=verify-full")
        var dumped = ""
        dump(configuration, to: &dumped)
        for text in [configuration.description, configuration.debugDescription, "\(configuration)", String(reflecting: configuration), dumped] {
            XCTAssertFalse(text.contains("Sup3rS3cret"), text)
        }
    }
}
