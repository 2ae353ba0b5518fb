#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One (root, service, access group) namespace: its directory, writer lock and item naming.
struct Namespace: Sendable {
    let layout: KeystoreLayout
    let group: AccessGroup
    let directory: String
    let fileMode: mode_t
    let lock: NamespaceLock
    /// Binds sealed items to service, group and key name.
    private let binding: ItemBinding

    static let itemSuffix = ".item"

    init(layout: KeystoreLayout, group: AccessGroup, lockTimeout: Duration) {
        self.layout = layout
        self.group = group
        self.directory = layout.namespaceDirectory(group)
        self.fileMode = KeystoreLayout.fileMode(shared: group.isShared)
        self.lock = NamespaceLock(path: directory + "/.lock", mode: fileMode, timeout: lockTimeout)
        self.binding = ItemBinding(service: layout.service, group: group)
    }

    func associatedData(forKey key: String) -> [UInt8] {
        binding.associatedData(forKey: key)
    }

    static func validate(key: String) throws {
        try KeystoreLayout.validate(name: key, what: "item key", limit: KeystoreLayout.maximumKeyBytes)
    }

    func itemPath(forKey key: String) -> String {
        directory + "/" + Base64.urlEncode(key.utf8) + Self.itemSuffix
    }

    /// The keys of the items on disk (unsorted); names that are not items are ignored.
    func itemKeys() throws -> [String] {
        try POSIX.listDirectory(directory).compactMap { name -> String? in
            guard name.hasSuffix(Self.itemSuffix), !name.hasPrefix(".") else { return nil }
            guard let bytes = Base64.urlDecode(String(name.dropLast(Self.itemSuffix.count))),
                  let key = String(validating: bytes, as: UTF8.self), !key.isEmpty,
                  Base64.urlEncode(key.utf8) + Self.itemSuffix == name
            else { return nil }
            return key
        }
    }

    func readSealed(forKey key: String) throws -> [UInt8]? {
        try POSIX.readFile(itemPath(forKey: key))
    }

    func open(_ sealed: [UInt8], forKey key: String, with secret: SecretBytes) throws -> [UInt8] {
        do {
            return try Sealing.open(sealed, key: secret, associatedData: associatedData(forKey: key))
        } catch let error as KeystoreError {
            throw KeystoreError(error.code, error.reason, path: itemPath(forKey: key), errno: error.errno, openSSLError: error.openSSLError)
        }
    }

    func seal(_ value: [UInt8], forKey key: String, with secret: SecretBytes) throws -> [UInt8] {
        try Sealing.seal(value, key: secret, associatedData: associatedData(forKey: key))
    }

    /// Removes temporary files a crashed writer left behind; only call under the lock.
    func sweepTemporaryFiles() throws {
        for name in try POSIX.listDirectory(directory) where name.hasPrefix(".tmp.") {
            try POSIX.removeFile(directory + "/" + name)
        }
    }
}
