import CCurlLoader

extension TransportError {
    /// Maps a failed transfer's `CURLcode` to a kind, keeping the code and libcurl's
    /// generic text for it. Never the error buffer: its text may quote the URL.
    init(curlCode code: CURLcode, exceededCap: Bool, cap: Int) {
        let kind: Kind
        switch code {
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_PROXY:
            kind = .connectFailed
        case CURLE_OPERATION_TIMEDOUT:
            kind = .timedOut
        case CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE,
             CURLE_HTTP2, CURLE_HTTP2_STREAM:
            kind = .connectionLost
        case CURLE_FILESIZE_EXCEEDED:
            kind = .responseTooLarge
        case CURLE_WRITE_ERROR where exceededCap:
            kind = .responseTooLarge
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
             CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ENGINE_NOTFOUND,
             CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED, CURLE_SSL_SHUTDOWN_FAILED,
             CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH,
             CURLE_SSL_INVALIDCERTSTATUS, CURLE_USE_SSL_FAILED:
            kind = .tlsFailed
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL, CURLE_BAD_FUNCTION_ARGUMENT:
            kind = .invalidRequest
        default:
            kind = .other
        }
        var message = String(cString: ib_curl_easy_strerror(code))
        if kind == .responseTooLarge {
            message = "response body exceeds the \(cap)-byte limit: " + message
        }
        self.init(kind: kind, curlCode: Int32(bitPattern: code.rawValue), message: message)
    }
}
