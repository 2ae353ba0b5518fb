#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging

/// Reads that go to the keystore first, for servers that must hand out what the store
/// holds at this instant (the credential server).
extension FederationClient {
    /// The session's credentials as the keystore holds them now: the saved record is read
    /// (and applied to this client's cache, so observers hear of it) before answering as
    /// ``credentials(for:)`` does.
    ///
    /// ``credentials(for:)`` answers from the cache, which hears of another process's
    /// change through the keystore's change feed (`SQLiteKeystore` polls it every 100 ms);
    /// this read does not wait for the feed, so a token pushed or a session cleared
    /// anywhere is seen by the very next call. When the keystore cannot be reached, the cached
    /// session answers (cached valid credentials are still served while the store
    /// is unreachable); when its item does not open (damaged, sealed with another key), the
    /// call fails with ``FederationError/Code/storage``.
    ///
    /// - Throws: as ``credentials(for:)``.
    package func credentialsReadingStore(for session: String) async throws(FederationError) -> AWSCredentials {
        try SessionName.validate(session)
        startChangeFeed()
        do {
            // Dropped when raced: a local federation or clear that committed while this read
            // waited is newer, and a change the feed reported meanwhile may be too. Read
            // again then; should the session keep changing, the answer below reads through
            // the cache, which the changes' own re-reads bring up to date.
            for _ in 1...Self.firstReadAttempts {
                if try await loadAndApply(session, droppingRaced: true, announcingNew: false) { break }
            }
        } catch where error.isUnreadableItem {
            // The store answered, and its item does not open (damaged, another key): that is
            // what the session is now, not something the cache may paper over.
            throw error
        } catch {
            logger.debug("store unreachable; answering from the cache", metadata: ["broker.session": "\(session)", "broker.error": "\(error.code)"])
        }
        return try await credentials(for: session)
    }
}
