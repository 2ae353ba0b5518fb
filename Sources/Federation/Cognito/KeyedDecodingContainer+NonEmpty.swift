#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension KeyedDecodingContainer {
    /// A required string that must not be empty: an empty identity ID, key or
    /// token is as useless as a missing one, and would otherwise be stored as a
    /// session's credentials. Throws `dataCorrupted` at the key, which
    /// ``CognitoResponseDecoder`` reports as a bad value in that field.
    func decodeNonEmpty(_ type: String.Type, forKey key: Key) throws -> String {
        let value = try decode(String.self, forKey: key)
        guard !value.isEmpty else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "empty")
        }
        return value
    }

    /// An optional string that, when present, must not be empty.
    func decodeNonEmptyIfPresent(_ type: String.Type, forKey key: Key) throws -> String? {
        guard let value = try decodeIfPresent(String.self, forKey: key) else { return nil }
        guard !value.isEmpty else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "empty")
        }
        return value
    }
}
