import BrokerTestSupport
import Foundation

/// Loopback stand-ins for Cognito Identity, answering by `X-Amz-Target`.
enum CannedCognito {
    static let poolId = "us-east-1:99999999-8888-7777-6666-555555555555"
    static let identityId = "us-east-1:11111111-2222-3333-4444-555555555555"
    static let accessKeyId = "ASIALOOPBACKACCESSKEY"
    static let secretKey = "LoopbackSecretKey/0123456789abcdefXYZ"
    static let sessionToken = "LoopbackSessionToken+0123456789abcdefXYZ"

    /// A service that always succeeds: GetId gives ``identityId``; GetCredentialsForIdentity
    /// gives credentials for the requested identity, expiring `lifetime` seconds after the request.
    static func healthy(lifetime: TimeInterval = 3600) throws -> LoopbackHTTPServer {
        try LoopbackHTTPServer { request in
            switch request.header("X-Amz-Target") {
            case "AWSCognitoIdentityService.GetId":
                return .json(#"{"IdentityId":"\#(identityId)"}"#)
            case "AWSCognitoIdentityService.GetCredentialsForIdentity":
                let requested = (try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])?["IdentityId"] as? String
                let expiration = Date().timeIntervalSince1970 + lifetime
                return .json(
                    #"{"IdentityId":"\#(requested ?? identityId)","Credentials":{"AccessKeyId":"\#(accessKeyId)","SecretKey":"\#(secretKey)","SessionToken":"\#(sessionToken)","Expiration":\#(expiration)}}"#
                )
            default:
                return .json(status: 400, #"{"__type":"UnknownOperationException","message":"unexpected target"}"#)
            }
        }
    }

    /// A service that answers every request with the error `type` and HTTP `status`.
    static func failing(status: Int, type: String, message: String) throws -> LoopbackHTTPServer {
        try LoopbackHTTPServer { _ in
            .json(status: status, #"{"__type":"\#(type)","message":"\#(message)"}"#)
        }
    }

    /// GetId succeeds, GetCredentialsForIdentity answers the error `type`.
    static func failingCredentials(status: Int, type: String, message: String) throws -> LoopbackHTTPServer {
        try LoopbackHTTPServer { request in
            if request.header("X-Amz-Target") == "AWSCognitoIdentityService.GetId" {
                return .json(#"{"IdentityId":"\#(identityId)"}"#)
            }
            return .json(status: status, #"{"__type":"\#(type)","message":"\#(message)"}"#)
        }
    }

    /// A JWT accepted by the local check: far-future `exp`.
    static func jwt(sub: String = "user-1") -> String {
        TestJWT.make(sub: sub, exp: Date().addingTimeInterval(3600), iss: "https://accounts.google.com")
    }
}
