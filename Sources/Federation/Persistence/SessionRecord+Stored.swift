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

    /// The record as ``Stored`` JSON, written field by field (``JSONObjectWriter``: what
    /// `JSONEncoder` writes for ``Stored``, at a fraction of its cost).
    func storedBytes(session: String) throws(FederationError) -> [UInt8] {
        var writer = JSONObjectWriter()
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
            let token = stored.sessionToken, let expiration = stored.expiration, expiration.isFinite
        {
            credentials = AWSCredentials(
                accessKeyId: accessKeyId, secretAccessKey: secret, sessionToken: token,
                expiration: Date(timeIntervalSince1970: expiration))
        }
        self.init(phase: stored.phase, identityId: stored.identityId, provider: stored.provider, credentials: credentials)
    }
}

/// Reads a stored record in exactly the shape `JSONEncoder` writes it: one object, no
/// whitespace, known keys at most once each, JSON strings and numbers. `nil` for anything else (which JSONDecoder then reads or rejects), so
/// a record read here is the one JSONDecoder would return.
struct StoredReader {
    private let bytes: [UInt8]
    private var index = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func read() -> SessionRecord.Stored? {
        var version: Int?, phase: SessionRecord.Phase?
        var identityId: String?, provider: String?, accessKeyId: String?, secretAccessKey: String?, sessionToken: String?
        var expiration: Double?
        var seen: UInt8 = 0
        guard next() == UInt8(ascii: "{") else { return nil }
        if peek() == UInt8(ascii: "}") {
            index += 1
        } else {
            while true {
                guard let key = string() else { return nil }
                guard next() == UInt8(ascii: ":") else { return nil }
                let bit: UInt8
                switch key {
                case "version":
                    bit = 1 << 0
                    guard let number = number(), let value = Int(number) else { return nil }
                    version = value
                case "phase":
                    bit = 1 << 1
                    guard let text = string(), let value = SessionRecord.Phase(rawValue: text) else { return nil }
                    phase = value
                case "identityId": bit = 1 << 2; guard optionalString(&identityId) else { return nil }
                case "provider": bit = 1 << 3; guard optionalString(&provider) else { return nil }
                case "accessKeyId": bit = 1 << 4; guard optionalString(&accessKeyId) else { return nil }
                case "secretAccessKey": bit = 1 << 5; guard optionalString(&secretAccessKey) else { return nil }
                case "sessionToken": bit = 1 << 6; guard optionalString(&sessionToken) else { return nil }
                case "expiration":
                    bit = 1 << 7
                    if literalNull() { break }
                    guard let number = number(), let value = Double(number), value.isFinite else { return nil }
                    expiration = value
                default:
                    return nil
                }
                guard seen & bit == 0 else { return nil }
                seen |= bit
                switch next() {
                case UInt8(ascii: ","): continue
                case UInt8(ascii: "}"): break
                default: return nil
                }
                break
            }
        }
        guard index == bytes.count, let version, let phase else { return nil }
        return SessionRecord.Stored(
            version: version, phase: phase, identityId: identityId, provider: provider, accessKeyId: accessKeyId,
            secretAccessKey: secretAccessKey, sessionToken: sessionToken, expiration: expiration)
    }

    private mutating func next() -> UInt8? {
        guard index < bytes.count else { return nil }
        defer { index += 1 }
        return bytes[index]
    }

    private func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func literalNull() -> Bool {
        guard bytes.count - index >= 4, bytes[index] == UInt8(ascii: "n"), bytes[index + 1] == UInt8(ascii: "u"),
              bytes[index + 2] == UInt8(ascii: "l"), bytes[index + 3] == UInt8(ascii: "l")
        else { return false }
        index += 4
        return true
    }

    private mutating func optionalString(_ slot: inout String?) -> Bool {
        if literalNull() { return true }
        guard let text = string() else { return false }
        slot = text
        return true
    }

    /// A string with no raw control character, as valid UTF-8.
    private mutating func string() -> String? {
        guard next() == UInt8(ascii: "\"") else { return nil }
        var text: [UInt8] = []
        defer { ProviderTokenText.wipe(&text) }
        while let byte = next() {
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: text, as: UTF8.self)
            case UInt8(ascii: "\\"):
                switch next() {
                case UInt8(ascii: "\""): text.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): text.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): text.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): text.append(0x08)
                case UInt8(ascii: "f"): text.append(0x0C)
                case UInt8(ascii: "n"): text.append(0x0A)
                case UInt8(ascii: "r"): text.append(0x0D)
                case UInt8(ascii: "t"): text.append(0x09)
                case UInt8(ascii: "u"):
                    guard let scalar = escapedScalar() else { return nil }
                    text.append(contentsOf: Array(String(Character(scalar)).utf8))
                default: return nil
                }
            case 0..<0x20:
                return nil
            default:
                text.append(byte)
            }
        }
        return nil
    }

    /// The scalar of a `\uXXXX` escape whose `\u` was just read, a surrogate pair taking two;
    /// `nil` for a lone surrogate.
    private mutating func escapedScalar() -> Unicode.Scalar? {
        guard let first = hex4() else { return nil }
        if (0xD800..<0xDC00).contains(first) {
            guard next() == UInt8(ascii: "\\"), next() == UInt8(ascii: "u"), let second = hex4(), (0xDC00..<0xE000).contains(second)
            else { return nil }
            return Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
        }
        return Unicode.Scalar(first)
    }

    private mutating func hex4() -> UInt32? {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = next() else { return nil }
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    /// A number in JSON's grammar: `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`.
    private mutating func number() -> String? {
        let start = index
        func digits(_ reader: inout StoredReader) -> Int {
            var count = 0
            while let byte = reader.peek(), byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                reader.index += 1
                count += 1
            }
            return count
        }
        if peek() == UInt8(ascii: "-") { index += 1 }
        if peek() == UInt8(ascii: "0") {
            index += 1
        } else {
            guard let first = peek(), first >= UInt8(ascii: "1"), first <= UInt8(ascii: "9") else { return nil }
            _ = digits(&self)
        }
        if peek() == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { return nil }
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            index += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { return nil }
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }
}
