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

package struct GetIdOutput: Decodable, Sendable {
    package var IdentityId: String

    private enum CodingKeys: String, CodingKey { case IdentityId }

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

package struct GetCredentialsForIdentityOutput: Decodable, Sendable {
    package var IdentityId: String?
    package var Credentials: WireCredentials

    private enum CodingKeys: String, CodingKey { case IdentityId, Credentials }

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

package struct GetOpenIdTokenOutput: Decodable, Sendable {
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
        guard seconds.isFinite, seconds > 0, seconds < 1e11 else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "epoch seconds out of range")
        }
        date = Date(timeIntervalSince1970: seconds)
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
