#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Federation

/// The JSON bodies the server sends: the AWS container-credential-provider document and
/// an error document.
enum ContainerCredentialsBody {
    /// `{"AccessKeyId","SecretAccessKey","Token","Expiration"}`, `Expiration` in ISO 8601 UTC
    /// with whole seconds (`2026-11-22T19:14:07Z`), as the SDKs' container provider reads it.
    struct Credentials: Encodable {
        var accessKeyId: String
        var secretAccessKey: String
        var token: String
        var expiration: String

        enum CodingKeys: String, CodingKey {
            case accessKeyId = "AccessKeyId"
            case secretAccessKey = "SecretAccessKey"
            case token = "Token"
            case expiration = "Expiration"
        }

        init(_ credentials: AWSCredentials) {
            accessKeyId = credentials.accessKeyId
            secretAccessKey = credentials.secretAccessKey
            token = credentials.sessionToken
            expiration = Self.expirationSent(for: credentials).formatted(Date.ISO8601FormatStyle())
        }

        /// The `Expiration` the document carries: whole seconds, rounded down, like the CLI's
        /// credential_process output.
        static func expirationSent(for credentials: AWSCredentials) -> Date {
            Date(timeIntervalSince1970: credentials.expiration.timeIntervalSince1970.rounded(.down))
        }
    }

    /// `{"code": …, "message": …}` for every refusal and failure.
    struct Failure: Encodable {
        var code: String
        var message: String
    }

    static func encode(_ value: some Encodable) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Both shapes hold strings only: encoding cannot fail.
        return (try? Array(encoder.encode(value))) ?? Array(#"{"code":"InternalError","message":"encoding failed"}"#.utf8)
    }
}
