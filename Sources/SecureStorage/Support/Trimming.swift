/// Trimming, once for the whole package: SecureStorage's key text and Federation's HTTP
/// headers, service error types and XML text all trim with this, each with its own notion
/// of padding. Written without Foundation (whose `trimmingCharacters` would pull it into
/// both modules) and `@inlinable`, because the HTTP header parser calls it on every line.
extension BidirectionalCollection {
    /// The elements from the first to the last that `isPadding` rejects (empty when
    /// every element is padding).
    @inlinable
    package func trimming(while isPadding: (Element) throws -> Bool) rethrows -> SubSequence {
        guard let first = try firstIndex(where: { try !isPadding($0) }) else { return self[endIndex...] }
        let last = try lastIndex(where: { try !isPadding($0) })!
        return self[first...last]
    }
}

extension BidirectionalCollection where Element == UInt8 {
    /// Without surrounding ASCII spaces and tabs: HTTP's optional whitespace (RFC 9110 `OWS`).
    @inlinable
    package var trimmingSpacesAndTabs: SubSequence {
        trimming { $0 == 0x20 || $0 == 0x09 }
    }
}

extension StringProtocol {
    /// Without surrounding spaces and tabs: HTTP's optional whitespace (RFC 9110 `OWS`).
    @inlinable
    package var trimmingSpacesAndTabs: SubSequence {
        trimming { $0 == " " || $0 == "\t" }
    }

    /// Without surrounding Unicode whitespace (line breaks included).
    @inlinable
    package var trimmingWhitespace: SubSequence {
        trimming(while: \.isWhitespace)
    }
}
