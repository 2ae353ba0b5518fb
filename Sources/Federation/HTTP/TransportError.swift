/// Why a transport could not deliver a complete response.
package struct TransportError: Error, Sendable, CustomStringConvertible {
    /// The broad cause, which decides whether a retry may help.
    package enum Kind: Sendable, Hashable {
        /// The connection could not be made (refused, DNS, TLS handshake).
        case connectFailed
        /// The connect or request timeout passed.
        case timedOut
        /// The connection broke or the response ended early.
        case connectionLost
        /// The body exceeded ``HTTPLimits/maxResponseBytes``.
        case responseTooLarge
        /// The request could not be built (bad URL, unsupported scheme).
        case invalidRequest
        /// TLS verification of the peer failed.
        case tlsFailed
        /// Anything else libcurl reported.
        case other
    }

    /// The broad cause.
    package var kind: Kind
    /// The `CURLcode` that caused it, when libcurl reported one.
    package var curlCode: Int32?
    /// A short description with no request data in it.
    package var message: String

    package init(kind: Kind, curlCode: Int32? = nil, message: String) {
        self.kind = kind
        self.curlCode = curlCode
        self.message = message
    }

    package var description: String {
        if let curlCode { return "\(message) (CURLcode \(curlCode))" }
        return message
    }
}
