#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// For `broker-bench` only (package access, not part of the library's API): the keystore key,
/// value and version a client stores for a federated session, so a benchmark can seed many
/// saved sessions with `Keystore.commit` directly instead of federating each one.
package enum StoredSessionForBenchmarks {
    /// The item a client stores after federating `session` with `provider` (an
    /// ``AuthProvider/identifier``) into `identityId` and `credentials`.
    package static func item(
        session: String, identityId: String, provider: String?, credentials: AWSCredentials
    ) throws(FederationError) -> (key: String, value: [UInt8], version: Int64) {
        let record = SessionRecord(phase: .federated, identityId: identityId, provider: provider, credentials: credentials)
        return (SessionStore.keyPrefix + session, try record.storedBytes(session: session), record.storeVersion)
    }
}
