#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Shared JSON coders with default settings: building one per request showed up
/// in profiles of many concurrent federations, and neither is mutated after creation.
enum JSONCoders {
    static let encoder = JSONEncoder()
    static let decoder = JSONDecoder()
}
