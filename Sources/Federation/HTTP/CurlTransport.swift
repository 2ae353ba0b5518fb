/// The default ``HTTPTransport``: libcurl, driven by one multi handle on one thread.
///
/// Why libcurl: it is on every Linux server the broker targets, speaks HTTP/1.1 and
/// HTTP/2 with connection reuse, and honours the usual proxy variables (`https_proxy`,
/// `no_proxy`, …) exactly as the `curl` tool does, which operators already understand.
///
/// Why one multi handle on one thread: many users federate at once in one process; one
/// multi handle shares connections and TLS sessions among all of them, and one driver
/// thread serves any number of concurrent requests (no thread per request, no blocking
/// of Swift's cooperative pool). See ``CurlMultiDriver``.
///
/// Every request is sent with TLS peer and host verification on (there is no option to
/// turn it off), redirects not followed (a 3xx is returned as a response), only `http`
/// and `https` allowed, and the response body capped by ``HTTPLimits/maxResponseBytes``.
/// Errors carry the `CURLcode` and libcurl's generic text for it, never the URL, the
/// headers or the body, which may hold tokens.
package final class CurlTransport: HTTPTransport, Sendable {
    /// The process-wide default instance, sharing its connections among all callers.
    /// It is never shut down.
    package static let shared = CurlTransport()

    private let driver: CurlMultiDriver

    /// Creates a transport with its own multi handle and connection cache.
    ///
    /// Most code should use ``shared``; separate instances are for tests and for
    /// isolating connection pools.
    ///
    /// - Parameters:
    ///   - maxConnectionsPerHost: Concurrent connections to one host; further requests
    ///     to it wait for a free connection (and reuse it). 0 means no limit.
    ///   - maxCachedConnections: Idle connections kept open for reuse.
    package init(maxConnectionsPerHost: Int = 32, maxCachedConnections: Int = 64) {
        // No libcurl work here: a client that only reads saved sessions (the CLI's
        // cache hit) never pays for `curl_global_init`; the driver runs it on first use.
        driver = CurlMultiDriver(
            maxCachedConnections: maxCachedConnections,
            maxConnectionsPerHost: maxConnectionsPerHost)
    }

    deinit {
        driver.shutdown()
    }

    /// Performs `request` once through libcurl.
    ///
    /// Cancelling the calling task, or firing the request's ``HTTPRequest/cancellation``,
    /// removes the transfer from the multi handle and throws `CancellationError` at once,
    /// without waiting for the server.
    ///
    /// - Throws: ``TransportError`` when no complete response arrived,
    ///   `CancellationError` when the task was cancelled or the signal fired.
    package func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        let transfer = CurlTransfer(id: driver.makeTransferID(), request: request)
        let driver = self.driver
        let cancel: @Sendable () -> Void = {
            if transfer.cancel() {
                driver.cancel(transferID: transfer.id)
            }
        }
        let perform = {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    if transfer.install(continuation) {
                        driver.submit(transfer)
                    }
                }
            } onCancel: {
                cancel()
            }
        }
        guard let signal = request.cancellation else { return try await perform() }
        return try await signal.withHandler(onFire: cancel, operation: perform)
    }

    /// Stops the driver thread and closes all connections, waiting until it has exited.
    ///
    /// Requests in flight fail with ``TransportError/Kind/other``; later requests fail the
    /// same way. For tests, which must not leak threads or sockets; `deinit` does the
    /// same.
    package func shutdown() {
        driver.shutdown()
    }
}
