import SecureStorage

/// One (service, access group) namespace of the PostgreSQL engine: its column values, its key
/// and its item binding (the same associated data as the SQLite engine's, so a row moved to
/// another key, service or group fails to open).
struct PostgresNamespace: Sendable {
    let service: String
    let group: AccessGroup
    let keys: KeyRing
    let binding: ItemBinding
    /// Whether the commit statement's `length(key)` counts bytes: on a `SQL_ASCII` database
    /// it does, on every other (whose text the server converts to the client's UTF-8) it
    /// counts characters, which are Unicode scalars.
    let keyLengthsInBytes: Bool

    /// The longest service or access-group name, in UTF-8 bytes (as the SQLite engine).
    static let maximumNameBytes = AccessGroup.maximumNameBytes
    /// The longest item key, in UTF-8 bytes (every engine's).
    static let maximumKeyBytes = ItemKey.maximumBytes

    init(service: String, group: AccessGroup, keys: KeyRing, keyLengthsInBytes: Bool = false) {
        self.service = service
        self.group = group
        self.keys = keys
        self.binding = ItemBinding(service: service, group: group)
        self.keyLengthsInBytes = keyLengthsInBytes
    }

    /// The `access_group` column: the group's name, or the empty string for
    /// ``AccessGroup/none`` (a named group is never empty).
    var groupColumn: String { Self.column(for: group) }

    static func column(for group: AccessGroup) -> String { group.name ?? "" }

    /// The start of every notification about this namespace: a format tag, then the service
    /// and the group column, each preceded by its length in Unicode scalars and a colon.
    /// Length-prefixed fields make it prefix-free, so a listener compares bytes and skips
    /// other namespaces' notifications without parsing them.
    var notificationPrefix: String {
        "ib2|\(service.unicodeScalars.count):\(service)\(groupColumn.unicodeScalars.count):\(groupColumn)"
    }

    /// The prefix, the committing instance's origin (16 hex digits) and a bar: what precedes
    /// the changed keys in a notification.
    func notificationHeader(origin: Int64) -> String {
        notificationPrefix + Self.hex(origin) + "|"
    }

    /// What starts the change feed's heartbeat notifications of the instance `origin`. It
    /// starts like no namespace's prefix, so every listener, of any release since `ib2`,
    /// skips other instances' heartbeats by comparing bytes.
    static func heartbeatHeader(origin: Int64) -> String {
        "ibhb|" + hex(origin) + "|"
    }

    /// An origin in 16 hex digits.
    private static func hex(_ origin: Int64) -> String {
        let hex = String(UInt64(bitPattern: origin), radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// A notification naming `keys`, each as its length (in Unicode scalars, or bytes: see
    /// ``keyLengthsInBytes``), a colon and the key (the encoding the commit statement builds
    /// in SQL); `*` (every key) when that would reach PostgreSQL's payload limit.
    func notification(origin: Int64, keys: [String]) -> String {
        let header = notificationHeader(origin: origin)
        var payload = header
        for key in keys { payload += "\(keyLengthsInBytes ? key.utf8.count : key.unicodeScalars.count):\(key)" }
        return payload.utf8.count < PostgresSchema.maximumPayloadBytes ? payload : header + "*"
    }

    /// What a notification says about this namespace: `nil` when it concerns another one;
    /// otherwise its origin and keys, with `nil` keys meaning every key (the `*` form, or
    /// anything that does not parse, which is safer reloaded than ignored).
    ///
    /// Parsed on the payload's UTF-8 bytes (the feed runs on an event loop): a forged
    /// header costs no more than the comparison, and no copy of the payload is made.
    func parseNotification(_ payload: String) -> (origin: Int64?, keys: [String]?)? {
        let prefix = notificationPrefix.utf8
        let utf8 = payload.utf8
        guard utf8.starts(with: prefix) else { return nil }
        let originStart = utf8.index(utf8.startIndex, offsetBy: prefix.count)
        guard let bar = utf8.index(originStart, offsetBy: 16, limitedBy: utf8.endIndex), bar < utf8.endIndex,
              utf8[bar] == UInt8(ascii: "|"),
              let bits = UInt64(String(decoding: utf8[originStart..<bar], as: UTF8.self), radix: 16)
        else { return (nil, nil) }
        let origin = Int64(bitPattern: bits)
        let records = utf8[utf8.index(after: bar)...]
        if records.elementsEqual("*".utf8) { return (origin, nil) }
        let keys = Self.keys(in: records, lengthsInBytes: keyLengthsInBytes)
        return (origin, keys?.isEmpty == false ? keys : nil)
    }

    /// The keys of `<length>:<key>` records, or `nil` when they do not parse. A length
    /// counts bytes or Unicode scalars; the bytes come from a `String`, so they are valid
    /// UTF-8 and a scalar's first byte says how many bytes it has.
    private static func keys(in records: Substring.UTF8View, lengthsInBytes: Bool) -> [String]? {
        var keys: [String] = []
        var index = records.startIndex
        while index < records.endIndex {
            guard let colon = records[index...].firstIndex(of: UInt8(ascii: ":")),
                  records.distance(from: index, to: colon) <= 8,
                  let length = Int(String(decoding: records[index..<colon], as: UTF8.self)), length > 0
            else { return nil }
            let start = records.index(after: colon)
            var end = start
            for _ in 0..<length {
                guard end < records.endIndex else { return nil }
                let width = lengthsInBytes ? 1 : scalarWidth(records[end])
                guard let next = records.index(end, offsetBy: width, limitedBy: records.endIndex) else { return nil }
                end = next
            }
            keys.append(String(decoding: records[start..<end], as: UTF8.self))
            index = end
        }
        return keys
    }

    /// How many bytes the UTF-8 scalar that starts with `lead` has.
    private static func scalarWidth(_ lead: UInt8) -> Int {
        switch lead {
        case 0xF0...: 4
        case 0xE0...: 3
        case 0xC0...: 2
        default: 1
        }
    }


    func seal(_ value: [UInt8], forKey key: String) throws(KeystoreError) -> [UInt8] {
        try binding.seal(value, with: keys.sealing, forKey: key)
    }

    /// Opens one row, as read through ``PostgresSchema/cappedValue``; a failure names the key
    /// and concerns that item alone.
    func open(_ sealed: [UInt8], forKey key: String) throws(KeystoreError) -> [UInt8] {
        guard !sealed.isEmpty else {
            throw KeystoreError(
                .corruptFormat, "item '\(key)' is empty or larger than the keystore's limit of \(Sealing.maximumSealedBytes) bytes")
        }
        return try keys.open(sealed, binding: binding, forKey: key).value
    }

    static func validate(key: String) throws(KeystoreError) {
        try NameRules.validate(key: key)
    }

    static func validate(service: String, group: AccessGroup) throws(KeystoreError) {
        try validate(name: service, what: "service name", limit: maximumNameBytes)
        if let name = group.name {
            try validate(name: name, what: "access group name", limit: maximumNameBytes)
        }
    }

    /// Non-empty, at most `limit` bytes, and no NUL (PostgreSQL text cannot hold one).
    private static func validate(name: String, what: String, limit: Int) throws(KeystoreError) {
        try NameRules.validate(name: name, what: what, limit: limit)
        guard !name.utf8.contains(0) else { throw KeystoreError(.invalidName, "the \(what) contains a NUL character") }
    }
}
