public import Foundation

/// Unsigned JWTs for demos against moto, which does not verify tokens. A real
/// identity provider signs its ID tokens; Cognito checks the signature.
public enum DemoJWT: Sendable {
    /// A JWT for `subject` from `issuer`, audience `demo-client`, expiring `lifetime`
    /// seconds from now, with a placeholder signature.
    public static func make(subject: String, issuer: String, lifetime: TimeInterval = 3600) -> String {
        let header = #"{"alg":"RS256","kid":"demo","typ":"JWT"}"#
        let expiry = Int(Date().timeIntervalSince1970 + lifetime)
        let payload = #"{"aud":"demo-client","exp":\#(expiry),"iss":"\#(issuer)","sub":"\#(subject)"}"#
        return [header, payload, "demo-signature-not-verified"].map(base64URL).joined(separator: ".")
    }

    private static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
