#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The shared JSON decoder, default settings: building one per response showed up in
/// profiles of many concurrent federations, and it is never mutated after creation. (Bodies
/// and stored records are written with ``JSONObjectWriter``.)
enum JSONCoders {
    static let decoder = JSONDecoder()
}
