#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Decodes a successful Cognito response, naming the missing or bad field when
/// it cannot.
package enum CognitoResponseDecoder {
    /// The output: read directly when the body has the exact compact shape Cognito sends
    /// (``CognitoResponseBody/readDirectly(_:)``), else by `JSONDecoder`, which decides.
    package static func decode<Output: CognitoResponseBody>(_ type: Output.Type, from body: [UInt8], operation: String) throws(FederationError) -> Output {
        if let output = Output.readDirectly(body) { return output }
        return try decodeWithJSONDecoder(type, from: body, operation: operation)
    }

    package static func decode<Output: Decodable>(_ type: Output.Type, from body: [UInt8], operation: String) throws(FederationError) -> Output {
        try decodeWithJSONDecoder(type, from: body, operation: operation)
    }

    private static func decodeWithJSONDecoder<Output: Decodable>(_ type: Output.Type, from body: [UInt8], operation: String) throws(FederationError) -> Output {
        do {
            return try JSONCoders.decoder.decode(Output.self, from: Data(body))
        } catch let error as DecodingError {
            throw FederationError(code: .invalidResponse, message: "\(operation) returned \(describe(error))", operation: operation, httpStatus: 200)
        } catch {
            throw FederationError(code: .invalidResponse, message: "\(operation) returned a body that is not JSON", operation: operation, httpStatus: 200)
        }
    }

    /// Names the field at fault, never its value (a value may be a secret).
    static func describe(_ error: DecodingError) -> String {
        func path(_ codingPath: [any CodingKey]) -> String {
            codingPath.map(\.stringValue).joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context):
            let parent = path(context.codingPath)
            return "a response without the field '\(parent.isEmpty ? key.stringValue : parent + "." + key.stringValue)'"
        case .valueNotFound(_, let context):
            return "a null for the field '\(path(context.codingPath))'"
        case .typeMismatch(_, let context):
            return context.codingPath.isEmpty ? "a body that is not a JSON object" : "the field '\(path(context.codingPath))' with the wrong type"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "a malformed or truncated JSON body" : "a bad value in the field '\(path(context.codingPath))'"
        @unknown default:
            return "a body that could not be decoded"
        }
    }
}
