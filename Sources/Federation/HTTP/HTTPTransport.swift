#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Sends one HTTP request and returns the whole response.
///
/// The libcurl client (``CurlTransport``) is the default. Tests inject a closure
/// transport (``ClosureTransport``) to drive logic without a socket; integration
/// tests still go through libcurl to a loopback server.
package protocol HTTPTransport: Sendable {
    /// Performs `request` once (no retries at this layer).
    ///
    /// - Throws: ``TransportError`` for anything that stops a complete response
    ///   from arriving, and `CancellationError` when the calling task is cancelled.
    func send(_ request: HTTPRequest) async throws -> HTTPResponse
}

/// A transport built from a closure, for tests and adapters.
package struct ClosureTransport: HTTPTransport {
    private let handler: @Sendable (HTTPRequest) async throws -> HTTPResponse

    package init(_ handler: @escaping @Sendable (HTTPRequest) async throws -> HTTPResponse) {
        self.handler = handler
    }

    package func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        try await handler(request)
    }
}
