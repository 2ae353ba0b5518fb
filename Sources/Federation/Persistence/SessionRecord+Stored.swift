#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The stored form of a ``SessionRecord``: versioned JSON, sealed by the keystore.
extension SessionRecord {
    struct Stored: Codable, Equatable {
        var version: Int
        var phase: SessionRecord.Phase
        var identityId: String?
        var provider: String?
        var accessKeyId: String?
        var secretAccessKey: String?
        var sessionToken: String?
        var expiration: Double?
        var versionFloor: Int64?
    }

    /// The version a stored record carries: of two federations racing on a session, the
    /// later expiration wins; a login wins over any guest (a guest never replaces a login,
    /// whichever client saves it; a login replaces a guest, which is how it is linked), and a
    /// terminated record wins over any federation (only clearing leaves `terminated`).
    ///
    /// A login's version is its expiration in milliseconds, as every release writes it; a
    /// guest's is moved below every login's instead, so that logins saved by earlier
    /// releases still outrank guests, and logins saved here are replaced by an earlier
    /// release's later ones as they always were (a fleet mid-upgrade, a rollback).
    ///
    /// A federation that follows another (not racing it: it started from that record) is
    /// stored under at least that record's version (``versionFloor``), so it replaces it
    /// even with credentials that expire sooner; the store replaces a record of an equal
    /// version. Two such federations racing each other both carry the floor, and the one
    /// committed last stays (every client reads it).
    var storeVersion: Int64 {
        switch phase {
        case .terminated:
            return .max
        case .federated:
            let own = Self.version(expiringAt: credentials?.expiration, guest: provider == nil)
            guard let versionFloor else { return own }
            // A floor read from the store stays within its kind's versions: one planted there
            // (whoever can write the store) must not lift a guest over a login, nor a
            // federation to a terminated record's version.
            return max(own, min(versionFloor, Self.version(expiringAt: nil, guest: provider == nil, highest: true)))
        }
    }

    /// A federated record's own version: its expiration in milliseconds, between 0 and
    /// 9e15 (`highest`: that top, whatever `expiration`), less ``guestOffset`` for a guest.
    private static func version(expiringAt expiration: Date?, guest: Bool, highest: Bool = false) -> Int64 {
        let milliseconds = highest ? 9e15 : (expiration?.timeIntervalSince1970 ?? 0) * 1000
        // Expirations come from a decoder that bounds them, but a version must never trap.
        let bounded = milliseconds.isFinite ? Int64(min(max(milliseconds, 0), 9e15)) : 0
        return guest ? bounded - guestOffset : bounded
    }

    /// The ``versionFloor`` of `self`, a new federation, when it replaces `previous`, the
    /// record the session held when it started: `previous`'s version when that is above its
    /// own and of the same kind (a guest's floor never lifts it to a login's, nor the reverse),
    /// at most the version of credentials expiring at `latest` (the longest any flow gives,
    /// from now), so that a floor planted in the store does not live on in later records.
    func versionFloor(replacing previous: SessionRecord?, notAfter latest: Date) -> Int64? {
        guard let previous, previous.phase == .federated, phase == .federated, previous.isGuest == isGuest,
              previous.storeVersion > storeVersion
        else { return nil }
        return min(previous.storeVersion, Self.version(expiringAt: latest, guest: isGuest))
    }

    /// Taken from a guest's version: below every login's (expirations in milliseconds stay
    /// between 0 and 9e15), and guests still ordered by expiration among themselves.
    static let guestOffset: Int64 = 1 << 62

    /// The record as ``Stored`` JSON, written field by field (``JSONObjectWriter``: what
    /// `JSONEncoder` writes for ``Stored``, at a fraction of its cost).
    func storedBytes(session: String) throws(FederationError) -> [UInt8] {
        // Sized for this record: an `InMemoryKeystore` keeps the bytes as they are, and a
        // buffer grown by doubling from the default would hold up to twice the record (2 KiB
        // for a typical 1.3 KB one), which was most of the heap a live session cost.
        func length(_ text: String?) -> Int { text?.utf8.count ?? 0 }
        let textBytes = length(identityId) + length(provider) + length(credentials?.accessKeyId)
            + length(credentials?.secretAccessKey) + length(credentials?.sessionToken)
        // Member names, quotes and numbers take under 192 bytes; escapes (`\/` in tokens) a few.
        var writer = JSONObjectWriter(capacity: 192 + textBytes + textBytes / 16)
        writer.add("version", 1)
        writer.add("phase", phase.rawValue)
        writer.add("identityId", identityId)
        writer.add("provider", provider)
        writer.add("accessKeyId", credentials?.accessKeyId)
        writer.add("secretAccessKey", credentials?.secretAccessKey)
        writer.add("sessionToken", credentials?.sessionToken)
        do {
            try writer.add("expiration", credentials?.expiration.timeIntervalSince1970)
        } catch {
            throw FederationError(code: .storage, message: "could not encode session '\(session)' for saving")
        }
        // Only when set (as JSONEncoder leaves a nil optional out): earlier releases read the
        // record through JSONDecoder, which skips a member it does not know.
        if let versionFloor { writer.add("versionFloor", Int(versionFloor)) }
        return writer.finish()
    }

    init(stored bytes: [UInt8], session: String) throws(FederationError) {
        // JSONDecoder's generic machinery (metadata instantiated by mangled name, conformance
        // scans) was a tenth of a `federate credentials` cache hit; records as the encoder
        // writes them are read directly, anything else by JSONDecoder, which has the last word.
        var reader = StoredReader(bytes)
        guard let stored = reader.read() ?? (try? JSONCoders.decoder.decode(Stored.self, from: Data(bytes))),
              stored.version == 1
        else {
            throw FederationError(code: .storage, message: "saved session '\(session)' is not in a format this version reads; clear it")
        }
        var credentials: AWSCredentials?
        if let accessKeyId = stored.accessKeyId, let secret = stored.secretAccessKey,
            let token = stored.sessionToken, let seconds = stored.expiration
        {
            // The bound the wire's expirations get: whoever can write the store (a group
            // member with the key) could otherwise hand every reader a date that traps when
            // converted (`time_t` beyond 2^63 seconds) or never expires.
            guard let expiration = WireEpochSeconds.date(seconds: seconds) else {
                throw FederationError(code: .storage, message: "saved session '\(session)' has an expiration no credentials can have; clear it")
            }
            credentials = AWSCredentials(accessKeyId: accessKeyId, secretAccessKey: secret, sessionToken: token, expiration: expiration)
        }
        self.init(
            phase: stored.phase, identityId: stored.identityId, provider: stored.provider, credentials: credentials,
            versionFloor: stored.versionFloor)
    }
}

/// Reads a stored record in exactly the shape ``JSONObjectWriter`` and `JSONEncoder` write
/// it: one object, no whitespace, known keys at most once each, JSON strings and numbers.
/// `nil` for anything else (which JSONDecoder then reads or rejects), so a record read here is
/// the one JSONDecoder would return.
struct StoredReader {
    private var reader: FlatJSONReader

    init(_ bytes: [UInt8]) { reader = FlatJSONReader(bytes) }

    mutating func read() -> SessionRecord.Stored? {
        var version: Int?, phase: SessionRecord.Phase?
        var identityId: String?, provider: String?, accessKeyId: String?, secretAccessKey: String?, sessionToken: String?
        var expiration: Double?, versionFloor: Int64?
        var seen: UInt16 = 0
        let complete = reader.members { reader, key in
            let bit: UInt16
            switch key {
            case "version":
                bit = 1 << 0
                guard let number = reader.number(), let value = Int(number) else { return false }
                version = value
            case "phase":
                bit = 1 << 1
                guard let text = reader.string(), let value = SessionRecord.Phase(rawValue: text) else { return false }
                phase = value
            case "identityId": bit = 1 << 2; guard reader.optionalString(&identityId) else { return false }
            case "provider": bit = 1 << 3; guard reader.optionalString(&provider) else { return false }
            case "accessKeyId": bit = 1 << 4; guard reader.optionalString(&accessKeyId) else { return false }
            case "secretAccessKey": bit = 1 << 5; guard reader.optionalString(&secretAccessKey) else { return false }
            case "sessionToken": bit = 1 << 6; guard reader.optionalString(&sessionToken) else { return false }
            case "expiration":
                bit = 1 << 7
                if reader.literalNull() { break }
                guard let number = reader.number(), let value = Double(number), value.isFinite else { return false }
                expiration = value
            case "versionFloor":
                bit = 1 << 8
                guard let number = reader.number(), let value = Int64(number) else { return false }
                versionFloor = value
            default:
                return false
            }
            guard seen & bit == 0 else { return false }
            seen |= bit
            return true
        }
        guard complete, reader.isAtEnd, let version, let phase else { return nil }
        return SessionRecord.Stored(
            version: version, phase: phase, identityId: identityId, provider: provider, accessKeyId: accessKeyId,
            secretAccessKey: secretAccessKey, sessionToken: sessionToken, expiration: expiration, versionFloor: versionFloor)
    }
}
