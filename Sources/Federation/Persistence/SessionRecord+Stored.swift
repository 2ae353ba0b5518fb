#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The stored form of a ``SessionRecord``: versioned JSON, sealed by the keystore.
extension SessionRecord {
    private struct Stored: Codable {
        var version: Int
        var phase: SessionRecord.Phase
        var identityId: String?
        var provider: String?
        var accessKeyId: String?
        var secretAccessKey: String?
        var sessionToken: String?
        var expiration: Double?
    }

    /// The version a stored record carries: the later expiration wins, and a terminated
    /// record wins over any federation (only clearing leaves `terminated`).
    var storeVersion: Int64 {
        switch phase {
        case .terminated:
            return .max
        case .federated:
            let milliseconds = (credentials?.expiration.timeIntervalSince1970 ?? 0) * 1000
            // Expirations come from a decoder that bounds them, but a version must never trap.
            return milliseconds.isFinite ? Int64(min(max(milliseconds, 0), 9e15)) : 0
        }
    }

    func storedBytes(session: String) throws(FederationError) -> [UInt8] {
        let stored = Stored(
            version: 1,
            phase: phase,
            identityId: identityId,
            provider: provider,
            accessKeyId: credentials?.accessKeyId,
            secretAccessKey: credentials?.secretAccessKey,
            sessionToken: credentials?.sessionToken,
            expiration: credentials?.expiration.timeIntervalSince1970
        )
        do {
            return Array(try JSONCoders.encoder.encode(stored))
        } catch {
            throw FederationError(code: .storage, message: "could not encode session '\(session)' for saving")
        }
    }

    init(stored bytes: [UInt8], session: String) throws(FederationError) {
        guard let stored = try? JSONCoders.decoder.decode(Stored.self, from: Data(bytes)), stored.version == 1 else {
            throw FederationError(code: .storage, message: "saved session '\(session)' is not in a format this version reads; clear it")
        }
        var credentials: AWSCredentials?
        if let accessKeyId = stored.accessKeyId, let secret = stored.secretAccessKey,
            let token = stored.sessionToken, let expiration = stored.expiration, expiration.isFinite
        {
            credentials = AWSCredentials(
                accessKeyId: accessKeyId, secretAccessKey: secret, sessionToken: token,
                expiration: Date(timeIntervalSince1970: expiration))
        }
        self.init(phase: stored.phase, identityId: stored.identityId, provider: stored.provider, credentials: credentials)
    }
}
