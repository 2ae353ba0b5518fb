package import Foundation

/// Builds unsigned but well-formed JWTs (`base64url(header).base64url(payload).signature`)
/// for tests; the signature is a fixed fake, since the library never verifies it.
package enum TestJWT {
    /// The fake signature segment.
    package static let fakeSignature = "ZmFrZS1zaWduYXR1cmUtbm90LXZlcmlmaWVk"

    /// A JWT with the given claims; a `nil` claim is left out. `exp` is whole epoch seconds.
    package static func make(
        sub: String? = "us-east-1:aaaaaaaa-0000-0000-0000-00000000d0d0",
        exp: Date? = Date(timeIntervalSince1970: 1_700_003_600),
        iss: String? = "https://accounts.google.com",
        audience: String? = "test-client-id"
    ) -> String {
        var claims: [String: Any] = [:]
        if let sub { claims["sub"] = sub }
        if let exp { claims["exp"] = Int64(exp.timeIntervalSince1970.rounded(.down)) }
        if let iss { claims["iss"] = iss }
        if let audience { claims["aud"] = audience }
        return make(headerJSON: #"{"alg":"RS256","kid":"test-key","typ":"JWT"}"#, payloadJSON: json(claims))
    }

    /// A Google-shaped token (by default) that the local check accepts: it expires
    /// `lifetime` seconds from now on the real clock, hence also at any fake clock's earlier time.
    package static func valid(
        sub: String = "google-user-1",
        issuer: String = "https://accounts.google.com",
        audience: String = "test-client-id",
        lifetime: TimeInterval = 3600
    ) -> String {
        make(sub: sub, exp: Date().addingTimeInterval(lifetime), iss: issuer, audience: audience)
    }

    /// A token from raw JSON texts for the header and payload, each base64url-encoded.
    package static func make(headerJSON: String, payloadJSON: String, signature: String = fakeSignature) -> String {
        "\(base64URL(Data(headerJSON.utf8))).\(base64URL(Data(payloadJSON.utf8))).\(signature)"
    }

    /// Base64url without padding.
    package static func base64URL(_ data: Data) -> String {
        data.base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func json(_ object: [String: Any]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
