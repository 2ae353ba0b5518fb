#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// One HTTP request as the transport sends it.
package struct HTTPRequest: Sendable {
    /// The method, e.g. `POST`.
    package var method: String
    /// The absolute URL (`http` or `https` only).
    package var url: String
    /// Header fields in the order they are sent.
    package var headers: [(name: String, value: String)]
    /// The request body.
    package var body: [UInt8]
    /// Limits for this one attempt.
    package var limits: HTTPLimits
    /// Connects straight to the host, whatever proxy the environment names (`http_proxy`,
    /// `ALL_PROXY`, …): set for a plaintext `http://` loopback endpoint, which a proxy would
    /// never reach, and through which the provider token would cross the network in clear.
    package var bypassesProxies = false
    /// Which attempt of its call this is (1 for the first), for metrics and traces.
    package var attempt = 1
    /// Ends the transfer with `CancellationError` when fired, as cancelling the calling task
    /// does, without cancelling that task (a client's shutdown; see ``CancellationSignal``).
    package var cancellation: CancellationSignal?

    package init(
        method: String = "POST",
        url: String,
        headers: [(name: String, value: String)] = [],
        body: [UInt8] = [],
        limits: HTTPLimits = HTTPLimits()
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.limits = limits
    }

    /// The value of the first header named `name` (case-insensitive).
    package func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.name.lowercased() == lowered }?.value
    }
}

/// Per-attempt limits the transport enforces, and the certificate authorities its HTTPS
/// trusts.
package struct HTTPLimits: Sendable, Hashable {
    /// Time allowed to establish the connection (TCP and TLS). Default 10 s.
    package var connectTimeout: Duration
    /// Time allowed for the whole attempt, connect included. Default 30 s.
    package var requestTimeout: Duration
    /// The largest response body accepted; a longer one fails with
    /// ``TransportError/Kind/responseTooLarge`` without buffering past the cap. Default 1 MiB.
    package var maxResponseBytes: Int
    /// A PEM file of the certificate authorities HTTPS trusts, in place of libcurl's system
    /// bundle and directory; `nil` (the default) keeps the system's.
    package var certificateAuthorityFile: String?

    package init(
        connectTimeout: Duration = .seconds(10),
        requestTimeout: Duration = .seconds(30),
        maxResponseBytes: Int = 1 << 20,
        certificateAuthorityFile: String? = nil
    ) {
        self.connectTimeout = connectTimeout
        self.requestTimeout = requestTimeout
        self.maxResponseBytes = maxResponseBytes
        self.certificateAuthorityFile = certificateAuthorityFile
    }
}
