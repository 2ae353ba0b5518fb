/// The durable record of a migration in progress, at `state/<service>.svc/migration.journal`.
///
/// A text file, replaced atomically (temporary file, fsync, rename, directory fsync):
/// ```
/// identity-broker-migration 1
/// from none|group:<base64url name>
/// to none|group:<base64url name>
/// phase copy|delete
/// item <base64url key> <sha-256 hex of the source item file>     (delete phase only)
/// ```
/// In the copy phase the source is intact and the copy is simply redone. In the delete phase
/// every listed item has been copied, made durable and verified in the target; a source item
/// is deleted only while its file still has the recorded digest, so nothing written after
/// the copy can be lost.
struct MigrationJournal: Equatable {
    enum Phase: String { case copy, delete }

    struct Entry: Equatable {
        var key: String
        var sourceDigest: String
    }

    var from: AccessGroup
    var to: AccessGroup
    var phase: Phase
    var items: [Entry] = []

    static let header = "identity-broker-migration 1"

    func encoded() -> [UInt8] {
        var text = Self.header + "\n"
        text += "from \(KeystoreLayout.encode(from))\n"
        text += "to \(KeystoreLayout.encode(to))\n"
        text += "phase \(phase.rawValue)\n"
        for item in items {
            text += "item \(Base64.urlEncode(item.key.utf8)) \(item.sourceDigest)\n"
        }
        return Array(text.utf8)
    }

    static func decode(_ bytes: [UInt8], path: String) throws -> MigrationJournal {
        let corrupt = KeystoreError(.corruptFormat, "unreadable migration journal", path: path)
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
        guard lines.count >= 4, lines[0] == header,
              lines[1].hasPrefix("from "), let from = KeystoreLayout.decodeGroup(lines[1].dropFirst(5)),
              lines[2].hasPrefix("to "), let to = KeystoreLayout.decodeGroup(lines[2].dropFirst(3)),
              lines[3].hasPrefix("phase "), let phase = Phase(rawValue: String(lines[3].dropFirst(6)))
        else { throw corrupt }
        var journal = MigrationJournal(from: from, to: to, phase: phase)
        for line in lines.dropFirst(4) {
            let fields = line.split(separator: " ")
            guard fields.count == 3, fields[0] == "item",
                  let keyBytes = Base64.urlDecode(String(fields[1])),
                  let key = String(validating: keyBytes, as: UTF8.self),
                  fields[2].utf8.count == 64
            else { throw corrupt }
            journal.items.append(Entry(key: key, sourceDigest: String(fields[2])))
        }
        return journal
    }

    static func read(_ layout: KeystoreLayout) throws -> MigrationJournal? {
        guard let bytes = try POSIX.readFile(layout.journalPath) else { return nil }
        return try decode(bytes, path: layout.journalPath)
    }

    func write(_ layout: KeystoreLayout) throws {
        try POSIX.atomicWrite(encoded(), to: layout.journalPath, directory: layout.stateDirectory,
                              mode: KeystoreLayout.fileMode(shared: to.isShared || from.isShared))
    }
}
