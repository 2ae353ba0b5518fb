import Federation
import Foundation
import Glibc
import XCTest

/// moto's server (`python3 -m moto.server`) on 127.0.0.1 and a free port: a real,
/// independent implementation of Cognito Identity for interop tests.
///
/// ``start()`` throws `XCTSkip` when moto is not installed, except under CI, where
/// `.ci/run` installs moto and a missing moto is a failure; any other failure to start is
/// thrown with its cause.
public final class MotoServer: @unchecked Sendable {
    /// The base URL, e.g. `http://127.0.0.1:40123/` (`https` when started with certificates).
    public let endpoint: String
    /// The port moto listens on.
    public let port: Int
    /// The certificates moto serves HTTPS with, if any.
    public let certificates: TestCertificates?
    private let process: Process
    private let log: URL

    private init(process: Process, port: Int, certificates: TestCertificates?, log: URL) {
        self.process = process
        self.log = log
        self.port = port
        self.certificates = certificates
        endpoint = "\(certificates == nil ? "http" : "https")://127.0.0.1:\(port)/"
    }

    deinit { stop() }

    /// Starts moto and waits until it accepts connections (up to 30 s); with `certificates`,
    /// it serves HTTPS with their server certificate (its own ``call(_:_:)`` trusts their
    /// authority).
    public static func start(
        certificates: TestCertificates? = nil, file: StaticString = #filePath, line: UInt = #line
    ) throws -> MotoServer {
        do {
            return try onAFreePort { try launch(port: $0, certificates: certificates) }
        } catch let error as MotoError where error.notInstalled {
            throw missingPrerequisite(
                "moto's server could not be started (\(error)); install it with: pip install \"moto[server]\"", file: file, line: line)
        }
        // Anything else (moto installed but refusing its options, or slow to listen) is a
        // failure with its cause, never "not installed".
    }

    private static func launch(port: Int, certificates: TestCertificates?) throws -> MotoServer {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-m", "moto.server", "-H", "127.0.0.1", "-p", "\(port)"]
            + (certificates.map { ["-c", $0.certificateFile, "-k", $0.keyFile] } ?? [])
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("moto-\(getpid())-\(port).log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        // The child has its own descriptor; the parent's would stay open for the whole run.
        defer { try? handle.close() }
        try process.run()
        let server = MotoServer(process: process, port: port, certificates: certificates, log: log)
        // Only moto's own "Running on" line proves the listener is moto's: another process
        // that took the port first also accepts connections, until moto gives up on it.
        let listening = "Running on \(certificates == nil ? "http" : "https")://127.0.0.1:\(port)"
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            guard process.isRunning else {
                let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                server.stop()
                // `env` exits 127 without python3; python3 says so without the module.
                let missing = process.terminationStatus == 127 || output.contains("No module named")
                throw MotoError(message: "moto exited with status \(process.terminationStatus): \(output.suffix(400))", notInstalled: missing)
            }
            let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            if output.contains(listening) && canConnect(port: port) { return server }
            usleep(100_000)
        }
        server.stop()
        throw MotoError(message: "moto did not listen on port \(port) within 30 s")
    }

    /// Stops moto; safe to call more than once.
    ///
    /// SIGKILL, because a child spawned from a Swift concurrency thread inherits
    /// that thread's blocked-signal mask, SIGTERM included; moto has nothing to flush.
    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: log)
    }

    // MARK: - Cognito Identity administration (moto does not check signatures)

    /// Calls a Cognito Identity operation and returns its JSON object.
    public func call(_ operation: String, _ input: [String: Any]) async throws -> [String: Any] {
        let body = try JSONSerialization.data(withJSONObject: input)
        var request = HTTPRequest(
            method: "POST",
            url: endpoint,
            headers: [
                ("Content-Type", "application/x-amz-json-1.1"),
                ("X-Amz-Target", "AWSCognitoIdentityService.\(operation)"),
                // moto reads the region and account from a SigV4-shaped header; it checks no signature.
                ("Authorization", "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/cognito-identity/aws4_request, SignedHeaders=host, Signature=0"),
            ],
            body: Array(body)
        )
        request.limits.certificateAuthorityFile = certificates?.authorityFile
        let response = try await CurlTransport.shared.send(request)
        guard response.status == 200 else {
            throw MotoError(message: "\(operation) answered HTTP \(response.status): \(String(decoding: response.body, as: UTF8.self).prefix(300))")
        }
        guard let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] else {
            throw MotoError(message: "\(operation) answered a non-object")
        }
        return object
    }

    /// Creates an identity pool and returns its ID.
    public func createIdentityPool(
        name: String = "broker-tests",
        allowUnauthenticated: Bool = true,
        developerProviderName: String? = nil,
        supportedLoginProviders: [String: String] = [:],
        openIdConnectProviderARNs: [String] = []
    ) async throws -> String {
        var input: [String: Any] = [
            "IdentityPoolName": name,
            "AllowUnauthenticatedIdentities": allowUnauthenticated,
        ]
        if let developerProviderName { input["DeveloperProviderName"] = developerProviderName }
        if !supportedLoginProviders.isEmpty { input["SupportedLoginProviders"] = supportedLoginProviders }
        if !openIdConnectProviderARNs.isEmpty { input["OpenIdConnectProviderARNs"] = openIdConnectProviderARNs }
        let output = try await call("CreateIdentityPool", input)
        guard let id = output["IdentityPoolId"] as? String else { throw MotoError(message: "CreateIdentityPool returned no IdentityPoolId") }
        return id
    }

    /// What a developer backend gets from `GetOpenIdTokenForDeveloperIdentity`.
    public func developerToken(poolId: String, developerProviderName: String, userId: String) async throws -> (identityId: String, token: String) {
        let output = try await call(
            "GetOpenIdTokenForDeveloperIdentity",
            ["IdentityPoolId": poolId, "Logins": [developerProviderName: userId]]
        )
        guard let identityId = output["IdentityId"] as? String, let token = output["Token"] as? String else {
            throw MotoError(message: "GetOpenIdTokenForDeveloperIdentity returned no IdentityId or Token")
        }
        return (identityId, token)
    }
}

/// Why moto could not be used.
public struct MotoError: Error, CustomStringConvertible {
    /// What went wrong.
    public var message: String
    /// Whether moto (or python3) is not installed: a missing prerequisite, not a failure.
    public var notInstalled: Bool
    /// The message.
    public var description: String { message }
    /// Creates an error with `message`.
    public init(message: String, notInstalled: Bool = false) {
        self.message = message
        self.notInstalled = notInstalled
    }
}

/// Runs `start` on a port that was free a moment ago, and on another if it fails, up to
/// three ports: between the look-up and the server's own `bind`, an outgoing connection of
/// the test process can take the port as its local one.
public func onAFreePort<T>(_ start: (Int) throws -> T) throws -> T {
    var attempt = 1
    while true {
        do {
            return try start(try freeLoopbackPort())
        } catch where attempt < 3 {
            attempt += 1
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago.
public func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw MotoError(message: "socket() failed: errno \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw MotoError(message: "bind() failed: errno \(errno)") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    guard named == 0 else { throw MotoError(message: "getsockname() failed: errno \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
}

private func canConnect(port: Int) -> Bool {
    guard let descriptor = LoopbackSocket.connect(port: UInt16(port)) else { return false }
    close(descriptor)
    return true
}
