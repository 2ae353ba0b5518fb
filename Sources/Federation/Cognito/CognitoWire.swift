#if canImport(FoundationEssentials)
package import FoundationEssentials
#else
package import Foundation
#endif

// The JSON 1.1 shapes of the Cognito Identity operations IdentityBroker calls.
// Property names are the wire names.

/// A request's input: written with ``JSONObjectWriter`` (each field, in order), and still
/// `Encodable`, which the tests use to check the writer against `JSONEncoder`.
protocol CognitoRequestBody: Encodable, Sendable {
    func write(to writer: inout JSONObjectWriter)
}

extension CognitoRequestBody {
    /// The request body.
    var jsonBody: [UInt8] {
        var writer = JSONObjectWriter()
        write(to: &writer)
        return writer.finish()
    }
}

struct GetIdInput: CognitoRequestBody {
    var IdentityPoolId: String
    var AccountId: String?
    var Logins: [String: String]?

    func write(to writer: inout JSONObjectWriter) {
        writer.add("IdentityPoolId", IdentityPoolId)
        writer.add("AccountId", AccountId)
        writer.add("Logins", Logins)
    }
}

// Outputs reject empty required strings (see `decodeNonEmpty`).

/// A successful response's output. `JSONDecoder` reads it; before that, ``readDirectly(_:)``
/// may read the exact compact shape Cognito sends without `JSONDecoder`'s generic machinery
/// (8 % of a federation's CPU at concurrency 1 for two responses). A direct read answers
/// only when `JSONDecoder` would answer the same, and `nil` for anything else (whitespace, an
/// unknown or repeated key, an escape it does not read, a value the validation refuses),
/// which `JSONDecoder` then reads or rejects with its error. `CognitoDirectReadTests` holds
/// the two to that.
package protocol CognitoResponseBody: Decodable, Sendable {
    static func readDirectly(_ body: [UInt8]) -> Self?
}

extension CognitoResponseBody {
    package static func readDirectly(_ body: [UInt8]) -> Self? { nil }
}

package struct GetIdOutput: CognitoResponseBody {
    package var IdentityId: String

    private enum CodingKeys: String, CodingKey { case IdentityId }

    init(IdentityId: String) { self.IdentityId = IdentityId }

    package static func readDirectly(_ body: [UInt8]) -> GetIdOutput? {
        var reader = FlatJSONReader(body)
        var identityId: String?
        let complete = reader.members { reader, key in
            key == "IdentityId" && reader.nonEmptyString(into: &identityId)
        }
        guard complete, reader.isAtEnd, let identityId else { return nil }
        return GetIdOutput(IdentityId: identityId)
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        IdentityId = try container.decodeNonEmpty(String.self, forKey: .IdentityId)
    }
}

struct GetCredentialsForIdentityInput: CognitoRequestBody {
    var IdentityId: String
    var Logins: [String: String]?
    var CustomRoleArn: String?

    func write(to writer: inout JSONObjectWriter) {
        writer.add("IdentityId", IdentityId)
        writer.add("Logins", Logins)
        writer.add("CustomRoleArn", CustomRoleArn)
    }
}

package struct GetCredentialsForIdentityOutput: CognitoResponseBody {
    package var IdentityId: String?
    package var Credentials: WireCredentials

    private enum CodingKeys: String, CodingKey { case IdentityId, Credentials }

    init(IdentityId: String?, Credentials: WireCredentials) {
        self.IdentityId = IdentityId
        self.Credentials = Credentials
    }

    package static func readDirectly(_ body: [UInt8]) -> GetCredentialsForIdentityOutput? {
        var reader = FlatJSONReader(body)
        var identityId: String?
        var credentials: WireCredentials?
        let complete = reader.members { reader, key in
            switch key {
            case "IdentityId":
                guard reader.nonEmptyString(into: &identityId) else { return false }
            case "Credentials":
                guard credentials == nil, let value = WireCredentials.readDirectly(&reader) else { return false }
                credentials = value
            default:
                return false
            }
            return true
        }
        guard complete, reader.isAtEnd, let credentials else { return nil }
        return GetCredentialsForIdentityOutput(IdentityId: identityId, Credentials: credentials)
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        IdentityId = try container.decodeNonEmptyIfPresent(String.self, forKey: .IdentityId)
        Credentials = try container.decode(WireCredentials.self, forKey: .Credentials)
    }
}

struct GetOpenIdTokenInput: CognitoRequestBody {
    var IdentityId: String
    var Logins: [String: String]?

    func write(to writer: inout JSONObjectWriter) {
        writer.add("IdentityId", IdentityId)
        writer.add("Logins", Logins)
    }
}

package struct GetOpenIdTokenOutput: CognitoResponseBody {
    package var IdentityId: String?
    package var Token: String

    private enum CodingKeys: String, CodingKey { case IdentityId, Token }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        IdentityId = try container.decodeNonEmptyIfPresent(String.self, forKey: .IdentityId)
        Token = try container.decodeNonEmpty(String.self, forKey: .Token)
    }
}

struct GetOpenIdTokenForDeveloperIdentityInput: CognitoRequestBody {
    var IdentityPoolId: String
    var IdentityId: String?
    var Logins: [String: String]
    var TokenDuration: Int?

    func write(to writer: inout JSONObjectWriter) {
        writer.add("IdentityPoolId", IdentityPoolId)
        writer.add("IdentityId", IdentityId)
        writer.add("Logins", Logins)
        if let TokenDuration { writer.add("TokenDuration", TokenDuration) }
    }
}

package struct WireCredentials: Decodable, Sendable {
    package var AccessKeyId: String
    package var SecretKey: String
    package var SessionToken: String
    package var Expiration: WireEpochSeconds

    private enum CodingKeys: String, CodingKey { case AccessKeyId, SecretKey, SessionToken, Expiration }

    /// The `Credentials` object in the exact compact shape, read as ``GetCredentialsForIdentityOutput/readDirectly(_:)`` explains.
    static func readDirectly(_ reader: inout FlatJSONReader) -> WireCredentials? {
        var accessKeyId: String?, secretKey: String?, sessionToken: String?, expiration: Date?
        let complete = reader.members { reader, key in
            switch key {
            case "AccessKeyId":
                guard reader.nonEmptyString(into: &accessKeyId) else { return false }
            case "SecretKey":
                guard reader.nonEmptyString(into: &secretKey) else { return false }
            case "SessionToken":
                guard reader.nonEmptyString(into: &sessionToken) else { return false }
            case "Expiration":
                guard expiration == nil, let number = reader.number(), let seconds = Double(number),
                      let date = WireEpochSeconds.date(seconds: seconds)
                else { return false }
                expiration = date
            default:
                return false
            }
            return true
        }
        guard complete, let accessKeyId, let secretKey, let sessionToken, let expiration else { return nil }
        return WireCredentials(
            AccessKeyId: accessKeyId, SecretKey: secretKey, SessionToken: sessionToken, Expiration: WireEpochSeconds(date: expiration))
    }

    init(AccessKeyId: String, SecretKey: String, SessionToken: String, Expiration: WireEpochSeconds) {
        self.AccessKeyId = AccessKeyId
        self.SecretKey = SecretKey
        self.SessionToken = SessionToken
        self.Expiration = Expiration
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        AccessKeyId = try container.decodeNonEmpty(String.self, forKey: .AccessKeyId)
        SecretKey = try container.decodeNonEmpty(String.self, forKey: .SecretKey)
        SessionToken = try container.decodeNonEmpty(String.self, forKey: .SessionToken)
        Expiration = try container.decode(WireEpochSeconds.self, forKey: .Expiration)
    }
}

/// `Expiration` is epoch seconds as a JSON number, possibly fractional or in
/// exponent form (`1.522664214E9`); a numeric string is tolerated too.
package struct WireEpochSeconds: Decodable, Sendable {
    package var date: Date

    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let seconds: Double
        if let number = try? container.decode(Double.self) {
            seconds = number
        } else if let text = try? container.decode(String.self), let number = Double(text) {
            seconds = number
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not epoch seconds")
        }
        guard let date = Self.date(seconds: seconds) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "epoch seconds out of range")
        }
        self.date = date
    }

    init(date: Date) { self.date = date }

    /// The date of `seconds` since 1970 when it is a plausible expiration (finite, after
    /// 1970, before the year 5138); `nil` otherwise.
    static func date(seconds: Double) -> Date? {
        guard seconds.isFinite, seconds > 0, seconds < 1e11 else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }
}

/// The body of a JSON 1.1 error response.
package struct WireErrorBody: Decodable, Sendable {
    var type: String?
    var message: String?

    private enum CodingKeys: String, CodingKey {
        case type = "__type"
        case message
        case Message
        case errorMessage
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        type = try? container.decodeIfPresent(String.self, forKey: .type)
        message = (try? container.decodeIfPresent(String.self, forKey: .message))
            ?? (try? container.decodeIfPresent(String.self, forKey: .Message))
            ?? (try? container.decodeIfPresent(String.self, forKey: .errorMessage))
    }
}
