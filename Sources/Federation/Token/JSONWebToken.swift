#if canImport(FoundationEssentials)
package import FoundationEssentials
#else
package import Foundation
#endif
import SecureStorage

/// The claims IdentityBroker reads from a JWT-shaped provider token.
///
/// The signature is not verified here (Cognito does that); the local check only
/// catches tokens that would certainly fail, before spending a request on them.
package struct JSONWebToken: Sendable {
    /// How far past `exp` a token may be and still be sent; clocks drift.
    static let expiryTolerance: Double = 300

    /// The `sub` claim.
    var subject: String?
    /// The `exp` claim, seconds since 1970.
    var expiresAt: Double?
    /// The `iss` claim.
    var issuer: String?

    /// Parses `token` as `header.payload.signature`, each base64url; header and
    /// payload must be JSON objects.
    ///
    /// - Throws: ``FederationError/Code/invalidToken`` naming what is wrong, never the token.
    package init(parsing token: String) throws(FederationError) {
        let segments = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3 else {
            throw Self.invalid("is not a JWT (expected 3 dot-separated parts, found \(segments.count))")
        }
        guard !segments[2].isEmpty else { throw Self.invalid("has an empty signature part") }
        guard let headerBytes = Self.base64URLDecode(segments[0]) else { throw Self.invalid("has a header that is not base64url") }
        guard let payloadBytes = Self.base64URLDecode(segments[1]) else { throw Self.invalid("has a payload that is not base64url") }
        let decoder = JSONCoders.decoder
        guard (try? decoder.decode(JSONObjectProbe.self, from: headerBytes)) != nil else {
            throw Self.invalid("has a header that is not a JSON object")
        }
        let claims: Claims
        do {
            claims = try decoder.decode(Claims.self, from: payloadBytes)
        } catch DecodingError.typeMismatch(_, let context) where !context.codingPath.isEmpty {
            throw Self.invalid("has a '\(context.codingPath.map(\.stringValue).joined(separator: "."))' claim of the wrong type")
        } catch {
            throw Self.invalid("has a payload that is not a JSON object")
        }
        if let exp = claims.exp, !exp.isFinite {
            throw Self.invalid("has an 'exp' claim that is not a finite number")
        }
        subject = claims.sub
        expiresAt = claims.exp
        issuer = claims.iss
    }

    /// Throws when `exp` is more than ``expiryTolerance`` in the past at `now`.
    package func checkNotExpired(now: Date) throws(FederationError) {
        guard let expiresAt else { return }
        let late = now.timeIntervalSince1970 - expiresAt
        guard late > Self.expiryTolerance else { return }
        // `exp` is the token's word, not ours: a value like -1e19 must not trap a conversion.
        let ago = Int(exactly: late.rounded(.down)).map { "\($0) s ago" } ?? "long ago"
        throw Self.invalid("expired \(ago); get a fresh token from the provider")
    }

    private static func invalid(_ problem: String) -> FederationError {
        FederationError(code: .invalidToken, message: "the provider token \(problem)")
    }

    private struct Claims: Decodable {
        var sub: String?
        var exp: Double?
        var iss: String?
    }

    /// One JWT part (RFC 7515 base64url, no padding) decoded; `=` padding is tolerated
    /// and dropped, whitespace is not, and an empty part is not a part.
    static func base64URLDecode(_ segment: Substring.UTF8View) -> Data? {
        guard !segment.isEmpty, segment.count % 4 != 1,
              !segment.contains(where: { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D })
        else { return nil }
        return Base64.decode(segment.lazy.filter { $0 != UInt8(ascii: "=") }).map { Data($0) }
    }
}
