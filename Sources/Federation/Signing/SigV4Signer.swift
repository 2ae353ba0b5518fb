#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SecureStorage

/// Signs a request with AWS Signature Version 4, for the one operation that needs
/// it here: a backend's `GetOpenIdTokenForDeveloperIdentity`.
///
/// Checked against the AWS SigV4 test suite's `get-vanilla` case and against
/// botocore's signer for the exact requests this library sends.
struct SigV4Signer: Sendable {
    var credentials: SigningCredentials
    var region: String
    var service: String
    /// The service's clock, which signatures carry (shared by copies of this signer).
    let clock = ClockSkew()

    /// Adds `Host`, `X-Amz-Date`, `X-Amz-Security-Token` (when there is a session
    /// token) and `Authorization` to `request`, signing every header it has.
    ///
    /// - Throws: ``FederationError/Code/invalidConfiguration`` for a URL that is not http(s);
    ///   ``FederationError/Code/cryptoFailure`` (with the `KeystoreError` attached) when
    ///   libcrypto fails to compute an HMAC.
    func sign(_ request: inout HTTPRequest, at date: Date) throws(FederationError) {
        guard let target = RequestTarget(url: request.url) else {
            throw FederationError(code: .invalidConfiguration, message: "cannot sign a request to '\(EndpointRule.preview(request.url))': not an http(s) URL")
        }
        let timestamp = Self.timestamp(date)
        let day = String(timestamp.prefix(8))
        request.headers.removeAll { ["host", "x-amz-date", "x-amz-security-token", "authorization"].contains($0.name.lowercased()) }
        request.headers.append(("Host", target.host))
        request.headers.append(("X-Amz-Date", timestamp))
        if let token = credentials.sessionToken {
            request.headers.append(("X-Amz-Security-Token", token))
        }

        var canonical: [(name: String, value: String)] = request.headers.map { header in
            (header.name.lowercased(), Self.collapse(header.value))
        }
        canonical.sort { $0.name < $1.name }
        let signedHeaders = canonical.map(\.name).joined(separator: ";")
        let canonicalRequest = [
            request.method,
            target.path,
            "",
            canonical.map { "\($0.name):\($0.value)\n" }.joined(),
            signedHeaders,
            Digest.hex(Digest.sha256(request.body)),
        ].joined(separator: "\n")

        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = [
            "AWS4-HMAC-SHA256",
            timestamp,
            scope,
            Digest.hex(Digest.sha256(Array(canonicalRequest.utf8))),
        ].joined(separator: "\n")

        let signature: String
        do throws(KeystoreError) {
            var key = try Digest.hmacSHA256(key: Array("AWS4\(credentials.secretAccessKey)".utf8), Array(day.utf8))
            key = try Digest.hmacSHA256(key: key, Array(region.utf8))
            key = try Digest.hmacSHA256(key: key, Array(service.utf8))
            key = try Digest.hmacSHA256(key: key, Array("aws4_request".utf8))
            signature = Digest.hex(try Digest.hmacSHA256(key: key, Array(stringToSign.utf8)))
        } catch {
            throw FederationError(
                code: .cryptoFailure, message: "cannot sign the request: \(error.reason) in libcrypto", keystoreError: error)
        }
        request.headers.append((
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyId)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
        ))
    }

    /// `yyyyMMdd'T'HHmmss'Z'` in UTC, without a calendar.
    static func timestamp(_ date: Date) -> String {
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = CivilCalendar.date(days: days)
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return pad(year, 4) + pad(month, 2) + pad(day, 2) + "T"
            + pad(secondOfDay / 3600, 2) + pad(secondOfDay % 3600 / 60, 2) + pad(secondOfDay % 60, 2) + "Z"
    }

    /// Trims and folds runs of spaces, as SigV4's canonical header values require.
    static func collapse(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }

    /// The host (with a non-default port) and path of an http(s) URL.
    struct RequestTarget {
        var host: String
        var path: String

        init?(url: String) {
            let rest: Substring
            let defaultPort: String
            if url.hasPrefix("https://") {
                rest = url.dropFirst(8)
                defaultPort = "443"
            } else if url.hasPrefix("http://") {
                rest = url.dropFirst(7)
                defaultPort = "80"
            } else {
                return nil
            }
            let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
            var authority = rest[..<authorityEnd]
            guard !authority.isEmpty, !authority.contains("@") else { return nil }
            if authority.hasSuffix(":" + defaultPort) { authority = authority.dropLast(defaultPort.count + 1) }
            host = authority.lowercased()
            let pathPart = rest[authorityEnd...].prefix { $0 != "?" && $0 != "#" }
            path = pathPart.isEmpty ? "/" : String(pathPart)
        }
    }
}
