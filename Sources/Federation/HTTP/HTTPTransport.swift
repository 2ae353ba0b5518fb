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
    ///   from arriving, and `CancellationError` when the calling task is cancelled or the
    ///   request's ``HTTPRequest/cancellation`` fires (every transport must watch it).
    func send(_ request: HTTPRequest) async throws -> HTTPResponse
}

/// A transport built from a closure, for tests and adapters.
package struct ClosureTransport: HTTPTransport {
    private let handler: @Sendable (HTTPRequest) async throws -> HTTPResponse

    package init(_ handler: @escaping @Sendable (HTTPRequest) async throws -> HTTPResponse) {
        self.handler = handler
    }

    /// Runs the handler in the calling task; when the request carries a
    /// ``HTTPRequest/cancellation``, in a task of its own that the signal cancels, since a
    /// handler knows nothing of the signal.
    package func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        guard let signal = request.cancellation else { return try await handler(request) }
        let handler = self.handler
        return try await signal.interruptible { try await handler(request) }
    }
}
