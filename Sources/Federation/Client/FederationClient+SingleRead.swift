#if canImport(FoundationEssentials)
package import FoundationEssentials
#else
package import Foundation
#endif
package import SecureStorage

extension FederationClient {
    /// What a keystore read throws (named here because the compiler does not count a type
    /// used only in a function type's `throws` clause as a use of its import).
    package typealias StorageError = KeystoreError

    /// The saved session `name` as a client made with ``init(keystore:expiryMargin:sessionCacheCapacity:logger:)``
    /// over the same keystore would report it from ``session(_:)``, read once through `read`
    /// (a keystore key in, its value out), with no client: no cache, no change feed, no timer.
    ///
    /// For a process that reads one session and exits (`federate credentials`), where
    /// creating the client and its keystore's feed costs more than the read.
    ///
    /// - Throws: as ``session(_:)``: ``FederationError/Code/invalidConfiguration`` for a bad
    ///   name; ``FederationError/Code/storage`` when the item cannot be read or opened.
    package static func savedSession(
        _ name: String,
        expiryMargin: Duration = FederationConfiguration.defaultExpiryMargin,
        now: Date = Date(),
        reading read: (String) throws(StorageError) -> [UInt8]?
    ) throws(FederationError) -> SessionSnapshot {
        try SessionName.validate(name)
        let record = try SessionStore.load(name, reading: read)
        return snapshot(name, SessionStateMachine(record: record, now: now, margin: expiryMargin), now: now, margin: expiryMargin)
    }

    /// The keystore key session `name` is saved under, for a reader that must know it before
    /// ``savedSession(_:expiryMargin:now:reading:)`` asks (one that reads asynchronously first).
    package static func storeKey(ofSession name: String) -> String {
        SessionStore.keyPrefix + name
    }
}
