#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SecureStorage

/// Keeps sessions in a ``SynchronousKeystore``, one sealed item per session under
/// `session.NAME`. The provider token is never part of what is saved.
struct KeystoreSessionPersistence: SessionPersistence {
    static let keyPrefix = "session."

    let keystore: any SynchronousKeystore

    /// The saved form, versioned so later releases can read old items.
    private struct StoredSession: Codable {
        var version: Int
        var phase: SessionRecord.Phase
        var identityId: String?
        var provider: String?
        var accessKeyId: String?
        var secretAccessKey: String?
        var sessionToken: String?
        var expiration: Double?
    }

    func loadAll() throws(FederationError) -> [String: SessionRecord] {
        var sessions: [String: SessionRecord] = [:]
        for key in try attempt("list the saved sessions", { try keystore.keys() }) where key.hasPrefix(Self.keyPrefix) {
            let name = String(key.dropFirst(Self.keyPrefix.count))
            guard let bytes = try attempt("read saved session '\(name)'", { try keystore.data(forKey: key) }) else { continue }
            sessions[name] = try decode(bytes, session: name)
        }
        return sessions
    }

    func save(_ record: SessionRecord, session: String) throws(FederationError) {
        let stored = StoredSession(
            version: 1,
            phase: record.phase,
            identityId: record.identityId,
            provider: record.provider,
            accessKeyId: record.credentials?.accessKeyId,
            secretAccessKey: record.credentials?.secretAccessKey,
            sessionToken: record.credentials?.sessionToken,
            expiration: record.credentials?.expiration.timeIntervalSince1970
        )
        let bytes: [UInt8]
        do {
            bytes = Array(try JSONEncoder().encode(stored))
        } catch {
            throw FederationError(code: .storage, message: "could not encode session '\(session)' for saving")
        }
        try attempt("save session '\(session)'", { try keystore.set(bytes, forKey: Self.keyPrefix + session) })
    }

    func remove(session: String) throws(FederationError) {
        try attempt("remove saved session '\(session)'", { try keystore.remove(forKey: Self.keyPrefix + session) })
    }

    private func decode(_ bytes: [UInt8], session: String) throws(FederationError) -> SessionRecord {
        guard let stored = try? JSONDecoder().decode(StoredSession.self, from: Data(bytes)), stored.version == 1 else {
            throw FederationError(code: .storage, message: "saved session '\(session)' is not in a format this version reads; clear it")
        }
        var credentials: AWSCredentials?
        if let accessKeyId = stored.accessKeyId, let secret = stored.secretAccessKey,
            let token = stored.sessionToken, let expiration = stored.expiration
        {
            credentials = AWSCredentials(
                accessKeyId: accessKeyId, secretAccessKey: secret, sessionToken: token,
                expiration: Date(timeIntervalSince1970: expiration))
        }
        return SessionRecord(phase: stored.phase, identityId: stored.identityId, provider: stored.provider, credentials: credentials)
    }

    /// Runs a keystore call, turning its error into a ``FederationError/Code/storage`` one.
    private func attempt<T>(_ what: String, _ body: () throws -> T) throws(FederationError) -> T {
        do {
            return try body()
        } catch let error as KeystoreError {
            throw FederationError(code: .storage, message: "could not \(what): \(error.code)", keystoreError: error)
        } catch {
            throw FederationError(code: .storage, message: "could not \(what): \(type(of: error))")
        }
    }
}
