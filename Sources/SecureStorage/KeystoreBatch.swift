/// Writes to apply together in one atomic, durable ``Keystore/commit(_:)``.
///
/// Operations apply in the order they were added; a later operation on the same key sees the
/// effect of an earlier one.
public struct KeystoreBatch: Sendable {
    /// One write of a batch.
    public enum Operation: Sendable, Hashable {
        /// Store `value` under `key`; with a `version`, only when the stored item has no
        /// version or a version lower than or equal to it.
        case set(key: String, value: [UInt8], version: Int64?)
        /// Remove the item under `key`.
        case remove(key: String)

        /// The key this operation writes.
        public var key: String {
            switch self {
            case .set(let key, _, _), .remove(let key): key
            }
        }
    }

    /// The operations, in the order they apply; implementations of ``Keystore`` read them.
    public private(set) var operations: [Operation] = []

    /// Who wrote the batch, for ``WriterFilteringKeystore`` (package-internal; `nil` by default).
    package var writer: UInt64?

    /// An empty batch.
    public init() {}

    /// Adds a write of `value` under `key`, versioned when `version` is given (see
    /// ``Keystore/set(_:forKey:version:)``).
    public mutating func set(_ value: [UInt8], forKey key: String, version: Int64? = nil) {
        operations.append(.set(key: key, value: value, version: version))
    }

    /// Adds the removal of the item under `key`.
    public mutating func remove(forKey key: String) {
        operations.append(.remove(key: key))
    }

    /// Whether the batch holds no operation.
    public var isEmpty: Bool { operations.isEmpty }
}

// Values are plaintext (a session's holds its secret key and session token): printing a batch
// or an operation, or dumping it, shows keys, versions and value sizes only.
extension KeystoreBatch.Operation: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// `set(key, N bytes, version V)` or `remove(key)`; never the value.
    public var description: String {
        switch self {
        case .set(let key, let value, let version):
            "set(\(key), \(value.count) bytes\(version.map { ", version \($0)" } ?? ""))"
        case .remove(let key):
            "remove(\(key))"
        }
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// The key, the value's size and the version; never the value.
    public var customMirror: Mirror {
        switch self {
        case .set(let key, let value, let version):
            Mirror(self, children: ["key": key, "valueBytes": value.count, "version": version as Any], displayStyle: .enum)
        case .remove(let key):
            Mirror(self, children: ["key": key], displayStyle: .enum)
        }
    }
}

extension KeystoreBatch: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The operations as ``Operation/description`` shows them; never a value.
    public var description: String { "KeystoreBatch(\(operations.map(\.description).joined(separator: ", ")))" }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// The operations, each mirrored without its value.
    public var customMirror: Mirror { Mirror(self, children: ["operations": operations], displayStyle: .struct) }
}
