#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A complete HTTP response.
package struct HTTPResponse: Sendable {
    /// The status code of the final response.
    package var status: Int
    /// Header fields of the final response, names lowercased.
    package var headers: [(name: String, value: String)]
    /// The body, never longer than the request's cap.
    package var body: [UInt8]

    package init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers.map { (name: $0.name.lowercased(), value: $0.value) }
        self.body = body
    }

    /// The value of the first header named `name` (case-insensitive).
    package func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.name == lowered }?.value
    }
}
