import BrokerTestSupport
import Foundation

/// A loopback stand-in for Cognito Identity and STS on one port, for `--flow classic`:
/// GetId, GetOpenIdToken, and AssumeRoleWithWebIdentity (routed by the form's `Action`),
/// which answers `stsFailure` when given (error code and HTTP status).
enum CannedClassicFlow {
    static let openIdToken = "eyJraWQiOiJjbGkifQ.eyJzdWIiOiJjbGktb3BlbmlkIn0.Q2xpT3BlbklkVG9rZW5TaWduYXR1cmUwMDAx"
    static let accessKeyId = "ASIACLASSICCLIACCESS"
    static let secretKey = "ClassicCliSecretKey/0123456789abcdefXYZ"
    static let sessionToken = "ClassicCliSessionToken+0123456789abcdefXYZ"

    static func server(stsFailure: (code: String, status: Int, message: String)? = nil) throws -> LoopbackHTTPServer {
        try LoopbackHTTPServer { request in
            switch request.header("X-Amz-Target") {
            case "AWSCognitoIdentityService.GetId":
                return .json(#"{"IdentityId":"\#(CannedCognito.identityId)"}"#)
            case "AWSCognitoIdentityService.GetOpenIdToken":
                return .json(#"{"IdentityId":"\#(CannedCognito.identityId)","Token":"\#(openIdToken)"}"#)
            case nil where request.bodyText.hasPrefix("Action=AssumeRoleWithWebIdentity&"):
                if let stsFailure {
                    return .respond(
                        status: stsFailure.status, headers: [("Content-Type", "text/xml")],
                        text: FakeCognito.stsErrorBody(code: stsFailure.code, message: stsFailure.message))
                }
                return .respond(headers: [("Content-Type", "text/xml")], text: FakeCognito.assumedRoleBody(
                    accessKeyId: accessKeyId, secretAccessKey: secretKey, sessionToken: sessionToken,
                    expirationLiteral: FakeCognito.iso8601(Date().addingTimeInterval(3600))))
            default:
                return .json(status: 400, #"{"__type":"UnknownOperationException","message":"unexpected request"}"#)
            }
        }
    }

    /// The decoded form parameters of the STS request `request`.
    static func form(_ request: RecordedRequest) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in request.bodyText.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            fields[String(parts[0])] = parts.count > 1 ? (String(parts[1]).removingPercentEncoding ?? "") : ""
        }
        return fields
    }
}
