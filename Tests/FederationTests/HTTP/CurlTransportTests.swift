import BrokerTestSupport
import Federation
import Foundation
import Synchronization
import XCTest

/// Drives the libcurl transport against the loopback server: the happy path, every
/// failure it must classify, connection reuse, cancellation and the safety settings
/// (no redirects, TLS never off, no secrets in errors).
///
/// Timeouts are small (hundreds of milliseconds) and only ever bound how long a
/// failure takes; nothing asserts how fast a success is.
final class CurlTransportTests: XCTestCase {
    private var transport: CurlTransport!
    private var servers: [LoopbackHTTPServer] = []

    override func setUp() {
        super.setUp()
        transport = CurlTransport()
    }

    override func tearDown() {
        transport.shutdown()
        transport = nil
        for server in servers { server.stop() }
        servers = []
        super.tearDown()
    }

    private func makeServer(
        _ handler: @escaping @Sendable (RecordedRequest) -> ScriptedResponse
    ) throws -> LoopbackHTTPServer {
        let server = try LoopbackHTTPServer(handler: handler)
        servers.append(server)
        return server
    }

    private func makeServer(_ response: ScriptedResponse) throws -> LoopbackHTTPServer {
        try makeServer { _ in response }
    }

    /// Sends `request` and returns the ``TransportError`` it must fail with.
    private func transportError(
        _ request: HTTPRequest, file: StaticString = #filePath, line: UInt = #line
    ) async -> TransportError? {
        do {
            let response = try await transport.send(request)
            XCTFail("expected a TransportError, got status \(response.status)", file: file, line: line)
        } catch let error as TransportError {
            return error
        } catch {
            XCTFail("expected a TransportError, got \(error)", file: file, line: line)
        }
        return nil
    }

    private static let quickLimits = HTTPLimits(
        connectTimeout: .milliseconds(300), requestTimeout: .milliseconds(300), maxResponseBytes: 1024)

    // MARK: Round trips

    func testPostRoundTripSendsAndReturnsEverything() async throws {
        let server = try makeServer(.respond(
            status: 201,
            headers: [("Content-Type", "application/x-amz-json-1.1"), ("X-Amzn-RequestId", "req-1")],
            text: #"{"IdentityId":"eu-west-1:abc"}"#))
        let body = Array(#"{"IdentityPoolId":"eu-west-1:pool"}"#.utf8)
        let response = try await transport.send(HTTPRequest(
            method: "POST",
            url: server.url("/path?x=1"),
            headers: [
                ("Content-Type", "application/x-amz-json-1.1"),
                ("X-Amz-Target", "AWSCognitoIdentityService.GetId"),
            ],
            body: body))

        XCTAssertEqual(response.status, 201)
        XCTAssertEqual(response.header("x-amzn-requestid"), "req-1")
        XCTAssertEqual(response.header("Content-Type"), "application/x-amz-json-1.1")
        XCTAssertTrue(response.headers.allSatisfy { $0.name == $0.name.lowercased() })
        XCTAssertEqual(String(decoding: response.body, as: UTF8.self), #"{"IdentityId":"eu-west-1:abc"}"#)

        let received = try XCTUnwrap(server.requests.first)
        XCTAssertEqual(server.requestCount, 1)
        XCTAssertEqual(received.method, "POST")
        XCTAssertEqual(received.target, "/path?x=1")
        XCTAssertEqual(received.path, "/path")
        XCTAssertEqual(received.header("x-amz-target"), "AWSCognitoIdentityService.GetId")
        XCTAssertEqual(received.headerValues("Content-Type"), ["application/x-amz-json-1.1"])
        XCTAssertEqual(received.header("Content-Length"), String(body.count))
        XCTAssertNil(received.header("Expect"), "no 100-continue round trip")
        XCTAssertEqual(received.body, body)
    }

    func testMethodsAndBodiesAreSentAsAsked() async throws {
        let server = try makeServer(.respond(text: "ok"))
        _ = try await transport.send(HTTPRequest(method: "GET", url: server.url("/get")))
        _ = try await transport.send(HTTPRequest(method: "POST", url: server.url("/empty")))
        _ = try await transport.send(HTTPRequest(method: "PUT", url: server.url("/put"), body: [0, 1, 2, 0]))

        let requests = server.requests
        XCTAssertEqual(requests.map(\.method), ["GET", "POST", "PUT"])
        XCTAssertEqual(requests[0].body, [])
        XCTAssertEqual(requests[1].body, [])
        XCTAssertEqual(requests[1].header("Content-Length"), "0")
        XCTAssertNil(requests[1].header("Content-Type"), "no invented form content type")
        XCTAssertEqual(requests[2].body, [0, 1, 2, 0], "binary bodies with NULs arrive intact")
    }

    /// Sequential transfers run on one easy handle, given back to the loop's pool after each.
    func testSequentialTransfersReuseOneEasyHandle() async throws {
        let server = try makeServer(.respond(text: "ok"))
        _ = try await transport.send(HTTPRequest(url: server.url("/first")))
        let before = CurlEasyHandlePool.handlesCreated
        for index in 0..<5 {
            _ = try await transport.send(HTTPRequest(method: index.isMultiple(of: 2) ? "GET" : "POST", url: server.url("/\(index)")))
        }
        XCTAssertEqual(CurlEasyHandlePool.handlesCreated - before, 0, "every transfer after the first reused its handle")
        XCTAssertEqual(server.requestCount, 6)
    }

    /// A handle whose configuration failed half-way (a body set, then a header refused) goes
    /// back to the pool too; the next request on it is sent as itself.
    func testAHandleWhoseConfigurationFailedIsReusedCleanly() async throws {
        let server = try makeServer(.respond(text: "ok"))
        let refused = await transportError(HTTPRequest(
            method: "PUT", url: server.url("/refused"),
            headers: [("X-Test", "a\r\nX-Evil: 1")], body: Array("half-configured-body".utf8)))
        XCTAssertEqual(refused?.kind, .invalidRequest)
        let before = CurlEasyHandlePool.handlesCreated
        let response = try await transport.send(HTTPRequest(method: "GET", url: server.url("/after")))
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(CurlEasyHandlePool.handlesCreated - before, 0, "the GET ran on the refused PUT's handle")
        let requests = server.requests
        XCTAssertEqual(requests.map(\.method), ["GET"], "the refused PUT sent nothing")
        XCTAssertEqual(requests.first?.path, "/after")
        XCTAssertEqual(requests.first?.body, [])
        XCTAssertNil(requests.first?.header("X-Evil"))
    }

    /// Easy handles are reused one after another (``CurlEasyHandlePool``): a request must
    /// not inherit the method, body, headers or limits of the one before it. (Today only the
    /// method would leak without `curl_easy_reset`: headers, cap and body are set again for
    /// every request; the other checks guard against that changing.)
    func testAReusedHandleCarriesNothingOfTheRequestBefore() async throws {
        let server = try makeServer { request in
            request.path == "/big" ? .respond(text: String(repeating: "x", count: 4096)) : .respond(text: "ok")
        }
        _ = try await transport.send(HTTPRequest(
            method: "PUT", url: server.url("/put"),
            headers: [("X-Provider-Token", "first-request-only"), ("Content-Type", "text/plain")],
            body: Array("put-body".utf8)))
        _ = try await transport.send(HTTPRequest(method: "POST", url: server.url("/post")))
        _ = try await transport.send(HTTPRequest(method: "GET", url: server.url("/get")))
        let refused = await transportError(HTTPRequest(method: "GET", url: server.url("/big"), limits: Self.quickLimits))
        XCTAssertEqual(refused?.kind, .responseTooLarge)
        let big = try await transport.send(HTTPRequest(method: "GET", url: server.url("/big")))
        XCTAssertEqual(big.body.count, 4096, "the previous request's 1 KiB cap is gone")

        let requests = server.requests
        XCTAssertEqual(requests.map(\.method), ["PUT", "POST", "GET", "GET", "GET"])
        XCTAssertEqual(requests[1].body, [], "no body left over from the PUT")
        XCTAssertEqual(requests[1].header("Content-Length"), "0")
        for later in requests.dropFirst() {
            XCTAssertNil(later.header("X-Provider-Token"), "\(later.path): a header of the PUT was sent again")
            XCTAssertNil(later.header("Content-Type"), "\(later.path): a header of the PUT was sent again")
        }
        XCTAssertEqual(requests[2].body, [])
    }

    func testNon2xxComesBackAsAResponse() async throws {
        let server = try makeServer(.respond(
            status: 400,
            headers: [("Content-Type", "application/x-amz-json-1.1")],
            text: #"{"__type":"NotAuthorizedException","message":"Invalid login token."}"#))
        let response = try await transport.send(HTTPRequest(url: server.url("/")))
        XCTAssertEqual(response.status, 400)
        XCTAssertTrue(String(decoding: response.body, as: UTF8.self).contains("NotAuthorizedException"))

        let failing = try makeServer(.respond(status: 503, text: "busy"))
        let unavailable = try await transport.send(HTTPRequest(url: failing.url("/")))
        XCTAssertEqual(unavailable.status, 503)
    }

    func testRedirectsAreNotFollowed() async throws {
        let server = try makeServer { request in
            request.path == "/start"
                ? .respond(status: 302, headers: [("Location", "/elsewhere")], text: "moved")
                : .respond(text: "followed")
        }
        let response = try await transport.send(HTTPRequest(method: "GET", url: server.url("/start")))
        XCTAssertEqual(response.status, 302)
        XCTAssertEqual(response.header("location"), "/elsewhere")
        XCTAssertEqual(server.requestCount, 1)
    }

    func testSlowDripWithinTheTimeoutSucceeds() async throws {
        let body = Array("0123456789".utf8)
        let server = try makeServer(.slowDrip(body: body, chunkSize: 2, interval: .milliseconds(10)))
        let response = try await transport.send(HTTPRequest(url: server.url("/")))
        XCTAssertEqual(response.body, body)
    }

    func testBodyExactlyAtTheCapIsAccepted() async throws {
        let body = [UInt8](repeating: 7, count: 1024)
        let server = try makeServer(.respond(body: body))
        let response = try await transport.send(HTTPRequest(url: server.url("/"), limits: Self.quickLimits))
        XCTAssertEqual(response.body, body)
    }

    // MARK: Failures and their kinds

    func testConnectionRefusedIsConnectFailed() async throws {
        let server = try LoopbackHTTPServer { _ in .respond() }
        let url = server.url("/")
        server.stop()
        let error = await transportError(HTTPRequest(url: url, limits: Self.quickLimits))
        XCTAssertEqual(error?.kind, .connectFailed)
        XCTAssertEqual(error?.curlCode, 7)
    }

    func testLateResponseIsTimedOut() async throws {
        let server = try makeServer(.respond(text: "late").delayed(by: .seconds(3)))
        let error = await transportError(HTTPRequest(url: server.url("/"), limits: Self.quickLimits))
        XCTAssertEqual(error?.kind, .timedOut)
        XCTAssertEqual(error?.curlCode, 28)
    }

    func testSlowDripPastTheTimeoutIsTimedOut() async throws {
        let server = try makeServer(.slowDrip(body: Array("0123456789".utf8), interval: .milliseconds(100)))
        let error = await transportError(HTTPRequest(url: server.url("/"), limits: Self.quickLimits))
        XCTAssertEqual(error?.kind, .timedOut)
    }

    func testAnnouncedOversizeBodyIsResponseTooLarge() async throws {
        let server = try makeServer(.oversize(byteCount: 64 * 1024))
        let error = await transportError(HTTPRequest(url: server.url("/"), limits: Self.quickLimits))
        XCTAssertEqual(error?.kind, .responseTooLarge)
    }

    func testUnannouncedOversizeBodyIsCutAtTheCap() async throws {
        let server = try makeServer(.oversize(byteCount: 1024 * 1024, chunked: true))
        let error = await transportError(HTTPRequest(url: server.url("/"), limits: Self.quickLimits))
        XCTAssertEqual(error?.kind, .responseTooLarge)
        XCTAssertEqual(error?.curlCode, 23, "the write callback refused the bytes past the cap")
    }

    func testTruncatedBodyIsConnectionLost() async throws {
        let server = try makeServer(.truncated(declaredLength: 100, body: Array("only this".utf8)))
        let error = await transportError(HTTPRequest(url: server.url("/"), limits: Self.quickLimits))
        XCTAssertEqual(error?.kind, .connectionLost)
    }

    func testDroppedConnectionIsConnectionLost() async throws {
        let server = try makeServer(.drop)
        let error = await transportError(HTTPRequest(url: server.url("/"), limits: Self.quickLimits))
        XCTAssertEqual(error?.kind, .connectionLost)
    }

    func testResetConnectionIsConnectionLost() async throws {
        let server = try makeServer(.reset)
        let error = await transportError(HTTPRequest(url: server.url("/"), limits: Self.quickLimits))
        XCTAssertEqual(error?.kind, .connectionLost)
    }

    func testHTTPSToAPlainPortFailsInsteadOfFallingBack() async throws {
        let server = try makeServer(.respond(text: "plain"))
        let url = "https://127.0.0.1:\(server.port)/"
        let limits = HTTPLimits(connectTimeout: .seconds(2), requestTimeout: .seconds(2))
        let error = await transportError(HTTPRequest(url: url, limits: limits))
        XCTAssertEqual(error?.kind, .tlsFailed)
        XCTAssertEqual(server.requests.count, 0, "nothing went out in clear text")
    }

    func testUnsupportedSchemeAndHeaderInjectionAreInvalidRequests() async throws {
        let ftp = await transportError(HTTPRequest(url: "ftp://127.0.0.1:1/file"))
        XCTAssertEqual(ftp?.kind, .invalidRequest)

        let server = try makeServer(.respond())
        let injected = await transportError(HTTPRequest(
            url: server.url("/"), headers: [("X-Test", "a\r\nX-Evil: 1")]))
        XCTAssertEqual(injected?.kind, .invalidRequest)
        XCTAssertEqual(server.requestCount, 0)
    }

    func testErrorsCarryNoRequestSecrets() async throws {
        let secrets = ["SECRET-QUERY", "SECRET-HEADER", "SECRET-BODY", "/secret-path"]
        let server = try makeServer(.drop)
        let request = HTTPRequest(
            url: server.url("/secret-path?token=SECRET-QUERY"),
            headers: [("Authorization", "Bearer SECRET-HEADER")],
            body: Array(#"{"Logins":{"accounts.google.com":"SECRET-BODY"}}"#.utf8),
            limits: Self.quickLimits)
        var failures: [TransportError] = []
        if let error = await transportError(request) { failures.append(error) }

        let timing = try makeServer(.respond().delayed(by: .seconds(3)))
        var late = request
        late.url = timing.url("/secret-path?token=SECRET-QUERY")
        if let error = await transportError(late) { failures.append(error) }

        XCTAssertEqual(failures.count, 2)
        for error in failures {
            let texts = [error.description, error.message, String(describing: error), String(reflecting: error)]
            for text in texts {
                for secret in secrets {
                    XCTAssertFalse(text.contains(secret), "\(secret) leaked into \(text)")
                }
            }
        }
    }

    // MARK: Concurrency, reuse, cancellation, shutdown

    func testSequentialRequestsReuseOneConnection() async throws {
        let server = try makeServer(.respond(text: "ok"))
        for _ in 0..<5 {
            let response = try await transport.send(HTTPRequest(url: server.url("/")))
            XCTAssertEqual(response.status, 200)
        }
        XCTAssertEqual(server.requestCount, 5)
        XCTAssertEqual(server.connectionCount, 1)
    }

    func testSixtyFourConcurrentRequestsAllSucceedOverReusedConnections() async throws {
        let server = try makeServer { request in
            .respond(text: "echo \(request.path)").delayed(by: .milliseconds(20))
        }
        let transport = try XCTUnwrap(self.transport)
        let results = try await withThrowingTaskGroup(of: (Int, HTTPResponse).self) { group in
            for index in 0..<64 {
                group.addTask {
                    (index, try await transport.send(HTTPRequest(url: server.url("/\(index)"))))
                }
            }
            return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        XCTAssertEqual(results.count, 64)
        for (index, response) in results {
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(String(decoding: response.body, as: UTF8.self), "echo /\(index)")
        }
        XCTAssertEqual(server.requestCount, 64)
        XCTAssertLessThan(server.connectionCount, 64, "connections were reused")
    }

    func testServerCarriesManyConnectionsAtOnce() async throws {
        let unlimited = CurlTransport(maxConnectionsPerHost: 0)
        defer { unlimited.shutdown() }
        // Every handler waits until all 96 requests have arrived, so they can only all
        // arrive if the client holds 96 connections open at once.
        let arrivals = Barrier(parties: 96)
        let server = try makeServer { _ in
            arrivals.arriveAndWait(timeout: .seconds(10))
            return .respond(text: "ok")
        }
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<96 {
                group.addTask { try await unlimited.send(HTTPRequest(url: server.url("/\(index)"))).status }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(statuses, Array(repeating: 200, count: 96))
        XCTAssertEqual(server.connectionCount, 96, "all requests were open at once on separate connections")
    }

    func testCancellationReturnsPromptlyWithCancellationError() async throws {
        let server = try makeServer(.respond(text: "too late").delayed(by: .seconds(5)))
        let transport = try XCTUnwrap(self.transport)
        let task = Task {
            try await transport.send(HTTPRequest(url: server.url("/slow")))
        }
        // Cancel once the request is really in flight at the server.
        let clock = ContinuousClock()
        let arrived = await eventually(timeout: .seconds(10)) { server.requestCount > 0 }
        XCTAssertTrue(arrived)
        XCTAssertEqual(server.requestCount, 1)

        let start = clock.now
        task.cancel()
        let result = await task.result
        XCTAssertLessThan(start.duration(to: clock.now), .seconds(3), "returned before the server's delay ended")
        XCTAssertThrowsError(try result.get()) { error in
            XCTAssertTrue(error is CancellationError, "got \(error)")
        }

        // The transport keeps working afterwards, on the cancelled transfer's handle (it left
        // the multi handle rather than waiting there for the server's late answer).
        let other = try makeServer(.respond(text: "fine"))
        let handlesBefore = CurlEasyHandlePool.handlesCreated
        let response = try await transport.send(HTTPRequest(url: other.url("/")))
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(CurlEasyHandlePool.handlesCreated - handlesBefore, 0, "the cancelled transfer still held its handle")
    }

    /// A client's shutdown fires the request's signal: the transfer ends as if cancelled,
    /// and the task that sent it is not cancelled.
    func testAFiredSignalEndsTheTransferWithoutCancellingTheTask() async throws {
        let server = try makeServer(.respond(text: "too late").delayed(by: .seconds(5)))
        let transport = try XCTUnwrap(self.transport)
        let signal = CancellationSignal()
        var request = HTTPRequest(url: server.url("/slow"))
        request.cancellation = signal
        let task = Task { () -> (Result<HTTPResponse, any Error>, taskCancelled: Bool) in
            do {
                return (.success(try await transport.send(request)), Task.isCancelled)
            } catch {
                return (.failure(error), Task.isCancelled)
            }
        }
        let clock = ContinuousClock()
        let arrived = await eventually(timeout: .seconds(10)) { server.requestCount > 0 }
        XCTAssertTrue(arrived)
        XCTAssertEqual(server.requestCount, 1)

        let start = clock.now
        signal.fire()
        let (result, taskCancelled) = await task.value
        XCTAssertLessThan(start.duration(to: clock.now), .seconds(3), "returned before the server's delay ended")
        XCTAssertThrowsError(try result.get()) { error in
            XCTAssertTrue(error is CancellationError, "got \(error)")
        }
        XCTAssertFalse(taskCancelled, "the signal cancelled the sending task")

        // A request carrying a signal that already fired is never sent.
        let other = try makeServer(.respond(text: "fine"))
        var late = HTTPRequest(url: other.url("/"))
        late.cancellation = signal
        do {
            _ = try await transport.send(late)
            XCTFail("a request with a fired signal was sent")
        } catch {
            XCTAssertTrue(error is CancellationError, "got \(error)")
        }
        XCTAssertEqual(other.requestCount, 0)
        // Without the signal the transport keeps working, on the cut transfer's handle: it
        // left the multi handle rather than waiting there for the server's late answer.
        let handlesBefore = CurlEasyHandlePool.handlesCreated
        let response = try await transport.send(HTTPRequest(url: other.url("/")))
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(CurlEasyHandlePool.handlesCreated - handlesBefore, 0, "the cut transfer still held its handle")
    }

    func testAlreadyCancelledTaskNeverSends() async throws {
        let server = try makeServer(.respond())
        let transport = try XCTUnwrap(self.transport)
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await transport.send(HTTPRequest(url: server.url("/")))
        }
        let result = await task.result
        XCTAssertThrowsError(try result.get()) { error in
            XCTAssertTrue(error is CancellationError, "got \(error)")
        }
        XCTAssertEqual(server.requestCount, 0)
    }

    func testShutdownLeavesNoSocketsOpen() async throws {
        // Warm up with the same work once: global initialisation (libcurl, the resolver,
        // OpenSSL) may open descriptors once per process and keep them.
        transport.shutdown()
        _ = try await Self.sendConcurrentlyAndShutDownWithOneInFlight()
        let before = try Self.openFileDescriptorCount()

        let port = try await Self.sendConcurrentlyAndShutDownWithOneInFlight()
        // Other tests in this process may hold descriptors of their own, so look
        // only for sockets to this test's server.
        XCTAssertEqual(try Self.socketsTouching(port: port), [], "sockets to the server left open after shutdown")
        // Nor any other descriptor (libcurl's multi handle, wake-up pipes, …): no more are
        // open than before the transport existed.
        XCTAssertLessThanOrEqual(try Self.openFileDescriptorCount(), before, "descriptors left open after shutdown")
    }

    /// A fresh transport sends 16 requests at once to a fresh server, then is shut down (and
    /// the server stopped) with one more request in flight; returns the server's port.
    private static func sendConcurrentlyAndShutDownWithOneInFlight(
        file: StaticString = #filePath, line: UInt = #line
    ) async throws -> Int {
        let transport = CurlTransport()
        let server = try LoopbackHTTPServer { request in
            request.path == "/slow" ? .respond().delayed(by: .seconds(30)) : .respond(text: "ok")
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<16 {
                group.addTask { _ = try await transport.send(HTTPRequest(url: server.url("/"))) }
            }
            try await group.waitForAll()
        }
        let inFlight = Task { try await transport.send(HTTPRequest(url: server.url("/slow"))) }
        while server.requestCount < 17 { try await Task.sleep(for: .milliseconds(10)) }
        transport.shutdown()
        server.stop()
        let outcome = await inFlight.result
        XCTAssertEqual((try? outcome.get())?.status, nil, "the request in flight failed", file: file, line: line)
        return server.port
    }

    /// The inodes of this process's TCP sockets whose local or remote port is `port`.
    private static func socketsTouching(port: Int) throws -> [String] {
        var inodes: Set<String> = []
        for name in try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)"),
                target.hasPrefix("socket:[")
            else { continue }
            inodes.insert(String(target.dropFirst(8).dropLast()))
        }
        let hexPort = String(format: "%04X", port)
        var touching: [String] = []
        for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
            guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 9, inodes.contains(String(fields[9])) else { continue }
                if fields[1].hasSuffix(":" + hexPort) || fields[2].hasSuffix(":" + hexPort) {
                    touching.append(String(fields[9]))
                }
            }
        }
        return touching
    }

    private static func openFileDescriptorCount() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
    }

    func testShutdownFailsLaterRequests() async throws {
        let server = try makeServer(.respond())
        _ = try await transport.send(HTTPRequest(url: server.url("/")))
        transport.shutdown()
        let error = await transportError(HTTPRequest(url: server.url("/")))
        XCTAssertEqual(error?.kind, .other)
        transport.shutdown()  // idempotent
    }
}

/// Lets server handler threads wait for each other (polling; test-only and short-lived).
private final class Barrier: Sendable {
    private let parties: Int
    private let arrived = Mutex(0)

    init(parties: Int) {
        self.parties = parties
    }

    func arriveAndWait(timeout: Duration) {
        arrived.withLock { $0 += 1 }
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while arrived.withLock({ $0 }) < parties, clock.now < deadline {
            Thread.sleep(forTimeInterval: 0.001)
        }
    }
}
