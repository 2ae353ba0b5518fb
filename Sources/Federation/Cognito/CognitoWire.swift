#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

// The JSON 1.1 shapes of the Cognito Identity operations IdentityBroker calls.
// Property names are the wire names.

struct GetIdInput: Encodable, Sendable {
    var IdentityPoolId: String
    var AccountId: String?
    var Logins: [String: String]?
}

struct GetIdOutput: Decodable, Sendable {
    var IdentityId: String
}

struct GetCredentialsForIdentityInput: Encodable, Sendable {
    var IdentityId: String
    var Logins: [String: String]?
    var CustomRoleArn: String?
}

struct GetCredentialsForIdentityOutput: Decodable, Sendable {
    var IdentityId: String?
    var Credentials: WireCredentials
}

struct GetOpenIdTokenInput: Encodable, Sendable {
    var IdentityId: String
    var Logins: [String: String]?
}

struct GetOpenIdTokenOutput: Decodable, Sendable {
    var IdentityId: String?
    var Token: String
}

struct GetOpenIdTokenForDeveloperIdentityInput: Encodable, Sendable {
    var IdentityPoolId: String
    var IdentityId: String?
    var Logins: [String: String]
    var TokenDuration: Int?
}

struct WireCredentials: Decodable, Sendable {
    var AccessKeyId: String
    var SecretKey: String
    var SessionToken: String
    var Expiration: WireEpochSeconds
}

/// `Expiration` is epoch seconds as a JSON number, possibly fractional or in
/// exponent form (`1.522664214E9`); a numeric string is tolerated too.
struct WireEpochSeconds: Decodable, Sendable {
    var date: Date

    init(from decoder: any Decoder) throws {
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
struct WireErrorBody: Decodable, Sendable {
    var type: String?
    var message: String?

    private enum CodingKeys: String, CodingKey {
        case type = "__type"
        case message
        case Message
        case errorMessage
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        type = try? container.decodeIfPresent(String.self, forKey: .type)
        message = (try? container.decodeIfPresent(String.self, forKey: .message))
            ?? (try? container.decodeIfPresent(String.self, forKey: .Message))
            ?? (try? container.decodeIfPresent(String.self, forKey: .errorMessage))
    }
}
