import BrokerTestSupport
import Foundation
import Synchronization
import XCTest
@testable import SecureStorage

/// Key sources on the SQLite engine: environment keys (canonical base64 only), passphrases
/// through scrypt with the parameters kept in the salt file, legacy salt files.
final class SQLiteKeySourceTests: XCTestCase {
    private func open(_ root: String, _ keySource: KeySource) throws -> SQLiteKeystore {
        let keystore = try SQLiteKeystore(root: root, service: "tool", keySource: keySource)
        addTeardownBlock { keystore.close() }
        return keystore
    }

    private func layout(_ root: String) throws -> StoreLayout {
        try StoreLayout(root: root, service: "tool")
    }

    func testEnvironmentKey() async throws {
        let temporary = try TemporaryRoot()
        let variable = environmentVariable()
        let key = (0..<32).map { UInt8($0) }
        setenv(variable, Data(key).base64EncodedString(), 1)
        let keystore = try open(temporary.root, .environment(variable: variable))
        try await keystore.set(bytes("value"), forKey: "k")
        // The same key given raw opens the item: the environment key is used as is.
        let raw = try open(temporary.root, .raw(key))
        let value = try await raw.value(forKey: "k")
        XCTAssertEqual(string(value), "value")
        // No key file is written for an environment key.
        XCTAssertFalse(FileManager.default.fileExists(atPath: try layout(temporary.root).keyFilePath(.none)))

        unsetenv(variable)
        let missing = assertThrows(KeystoreError.self, code: .invalidKey) { try SQLiteKeystore(root: temporary.root, service: "tool", keySource: .environment(variable: variable)) }
        XCTAssertTrue(missing?.reason.contains("not set") ?? false, missing?.reason ?? "")
        let short = Data(key.prefix(16)).base64EncodedString()
        setenv(variable, short, 1)
        let error = assertThrows(KeystoreError.self, code: .invalidKey) { try SQLiteKeystore(root: temporary.root, service: "tool", keySource: .environment(variable: variable)) }
        XCTAssertFalse(error?.description.contains(short) ?? true)
        setenv(variable, "not base64 !!", 1)
        _ = assertThrows(KeystoreError.self, code: .invalidKey) { try SQLiteKeystore(root: temporary.root, service: "tool", keySource: .environment(variable: variable)) }
        XCTAssertEqual(KeySource.environment().description, "environment(IDENTITY_BROKER_KEY)")
    }

    /// A key file named by a path opens what its key sealed, and is refused, without its
    /// bytes in the message, when another user could have written or read it, when it is a
    /// link or not a file, or has another size.
    func testAKeyFileNamedByAPathIsCheckedLikeTheKeystoresOwn() async throws {
        let temporary = try TemporaryRoot()
        let key = (0..<32).map { UInt8(200 - $0) }
        let path = temporary.path + "/old.key"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(key), attributes: [.posixPermissions: 0o600]))
        try await open(temporary.root, .raw(key)).set(bytes("value"), forKey: "k")
        let value = try await open(temporary.root, try .keyFile(at: path)).value(forKey: "k")
        XCTAssertEqual(string(value), "value")

        _ = assertThrows(KeystoreError.self, code: .invalidKey) { try KeySource.keyFile(at: temporary.path + "/missing.key") }
        chmod(path, 0o604)
        let readable = assertThrows(KeystoreError.self, code: .insecurePermissions) { try KeySource.keyFile(at: path) }
        XCTAssertTrue(readable?.reason.contains("world-readable") ?? false, readable?.reason ?? "")
        chmod(path, 0o620)
        _ = assertThrows(KeystoreError.self, code: .insecurePermissions) { try KeySource.keyFile(at: path) }
        chmod(path, 0o600)
        let link = temporary.path + "/link.key"
        XCTAssertEqual(symlink(path, link), 0)
        _ = assertThrows(KeystoreError.self, code: .io) { try KeySource.keyFile(at: link) }
        XCTAssertEqual(mkfifo(temporary.path + "/fifo.key", 0o600), 0)
        _ = assertThrows(KeystoreError.self, code: .insecurePermissions) { try KeySource.keyFile(at: temporary.path + "/fifo.key") }
        let short = temporary.path + "/short.key"
        XCTAssertTrue(FileManager.default.createFile(atPath: short, contents: Data(key.prefix(16)), attributes: [.posixPermissions: 0o600]))
        let size = assertThrows(KeystoreError.self, code: .invalidKey) { try KeySource.keyFile(at: short) }
        XCTAssertTrue(size?.reason.contains("exactly 32 bytes") ?? false, size?.reason ?? "")
    }

    func testPassphraseKey() async throws {
        let temporary = try TemporaryRoot()
        let passphrase = "correct horse battery staple"
        let source = KeySource.passphrase(passphrase)
        XCTAssertFalse(source.description.contains(passphrase))
        let keystore = try open(temporary.root, source)
        try await keystore.set(bytes("value"), forKey: "k")
        let saltPath = try layout(temporary.root).saltPath(.none)
        XCTAssertEqual(mode(of: saltPath), 0o600)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: saltPath)[.size] as? Int, KeyDerivation.SaltFile.size)
        XCTAssertFalse(FileManager.default.fileExists(atPath: try layout(temporary.root).keyFilePath(.none)))

        let again = try open(temporary.root, .passphrase(passphrase))
        let value = try await again.value(forKey: "k")
        XCTAssertEqual(string(value), "value")
        let error = assertThrows(KeystoreError.self, code: .invalidKey) { try self.open(temporary.root, .passphrase("pw-XYZZY-7")) }
        XCTAssertFalse(error?.description.contains("XYZZY") ?? true)
    }

    /// A key file or salt is made only for a namespace that holds nothing sealed: over items
    /// sealed with another key (a passphrase or environment key not given, a key file
    /// deleted), opening is refused and leaves nothing behind that later opens would use.
    func testNoKeyIsMadeOverItemsSealedWithAnother() async throws {
        let temporary = try TemporaryRoot()
        let team = AccessGroup(name: "team")
        let passphrase = KeySource.passphrase("sealed with this")
        for group in [AccessGroup.none, team] {
            let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: group, keySource: passphrase)
            try await keystore.set(bytes("value"), forKey: "k")
            keystore.close()
        }
        let layout = try layout(temporary.root)
        for group in [AccessGroup.none, team] {
            let error = assertThrows(KeystoreError.self, code: .invalidKey) {
                try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: group, keySource: .keyFile)
            }
            // A group's own refusal: its open needs no private key (none is made there either).
            XCTAssertEqual(error?.path, layout.keyFilePath(group), "\(group)")
            XCTAssertTrue(error?.reason.contains(KeystoreError.wrongKeyReason) == true, "\(String(describing: error))")
            XCTAssertFalse(FileManager.default.fileExists(atPath: layout.keyFilePath(.none)), "\(group): a key file was made")
            XCTAssertFalse(FileManager.default.fileExists(atPath: layout.keyFilePath(team)), "\(group): a key file was made")
        }
        // The other way round: sealed with a key file, opened with a passphrase.
        let keyFileRoot = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: keyFileRoot.root, service: "tool", keySource: .keyFile)
        try await keystore.set(bytes("value"), forKey: "k")
        keystore.close()
        let keyFileLayout = try self.layout(keyFileRoot.root)
        let saltError = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: keyFileRoot.root, service: "tool", keySource: .passphrase("never used"))
        }
        XCTAssertEqual(saltError?.path, keyFileLayout.saltPath(.none))
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyFileLayout.saltPath(.none)), "a salt was stored")
        // A deleted key file is not replaced by one that opens nothing.
        XCTAssertEqual(unlink(keyFileLayout.keyFilePath(.none)), 0)
        assertThrows(KeystoreError.self, code: .invalidKey) { try SQLiteKeystore(root: keyFileRoot.root, service: "tool", keySource: .keyFile) }
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyFileLayout.keyFilePath(.none)), "a key file was made")
        // The key that sealed still opens; a namespace with nothing sealed still gets its key.
        let reopened = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: passphrase)
        let value = try await reopened.value(forKey: "k")
        XCTAssertEqual(string(value), "value")
        reopened.close()
        try SQLiteKeystore(root: temporary.root, service: "other", keySource: .keyFile).close()
        XCTAssertTrue(FileManager.default.fileExists(atPath: layout.keyFilePath(.none)))
    }

    /// Opening the private namespace with a passphrase derives its key once: recording the
    /// last access group opens the same namespace, and its key is reused (each scrypt run
    /// costs ~0.3 s and 128 MiB; opening used to run it twice).
    func testOpeningThePrivateNamespaceDerivesThePassphraseKeyOnce() async throws {
        let temporary = try TemporaryRoot()
        let before = KeyDerivation.passphraseDerivations.load(ordering: .relaxed)
        let keystore = try open(temporary.root, .passphrase("derived once"))
        XCTAssertEqual(KeyDerivation.passphraseDerivations.load(ordering: .relaxed) - before, 1)
        try await keystore.set(bytes("value"), forKey: "k")
        keystore.close()
        let again = try open(temporary.root, .passphrase("derived once"))
        let value = try await again.value(forKey: "k")
        XCTAssertEqual(string(value), "value", "the reused key opens what it sealed")
        XCTAssertEqual(KeyDerivation.passphraseDerivations.load(ordering: .relaxed) - before, 2)
    }

    /// `.passphrase(environment["P"] ?? "")` must not seal anything under the key anyone
    /// holding the salt derives.
    func testAnEmptyPassphraseIsRefusedBeforeAnySaltIsStored() throws {
        let temporary = try TemporaryRoot()
        let error = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: temporary.root, service: "tool", keySource: .passphrase(""))
        }
        XCTAssertTrue(error?.reason.contains("empty") ?? false, String(describing: error))
        XCTAssertFalse(FileManager.default.fileExists(atPath: try layout(temporary.root).saltPath(.none)), "a salt was stored")
    }

    /// `dump` and `Mirror` bypass `description`: neither may reach the secret's buffer.
    func testAKeySourceDumpsAsItsDescription() {
        for source in [KeySource.passphrase("correct horse battery staple"), .raw(Array(repeating: 9, count: 32)), .keyFile] {
            var dumped = ""
            dump(source, to: &dumped)
            XCTAssertTrue(dumped.contains(source.description), dumped)
            XCTAssertFalse(dumped.contains("count"), "dump walked into the secret: \(dumped)")
            XCTAssertFalse(dumped.contains("correct horse"), dumped)
            XCTAssertEqual(Mirror(reflecting: source).children.count, 1)
        }
    }

    func testASharedGroupHasItsOwnSaltAndKey() async throws {
        let temporary = try TemporaryRoot()
        let team = AccessGroup(name: "team")
        let passphrase = "one passphrase, two groups"
        let personal = try open(temporary.root, .passphrase(passphrase))
        let shared = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: team, keySource: .passphrase(passphrase))
        defer { shared.close() }
        let layout = try layout(temporary.root)
        XCTAssertEqual(mode(of: layout.saltPath(team)), 0o640)
        XCTAssertNotEqual(FileManager.default.contents(atPath: layout.saltPath(team)), FileManager.default.contents(atPath: layout.saltPath(.none)))
        XCTAssertNotEqual(derivedKey(personal), derivedKey(shared), "one passphrase gives each group its own key")
    }

    // MARK: Canonical base64 in the environment

    /// A per-test variable, unset when the test ends.
    private func environmentVariable() -> String {
        let variable = "IB_TEST_KEY_\(getpid())_\(UInt32.random(in: 0...UInt32.max))"
        addTeardownBlock { unsetenv(variable) }
        return variable
    }

    /// A key whose canonical base64 holds both `+` and `/` and a last symbol with spare bits.
    private let canonicalKey: [UInt8] = [0xFB, 0xFF, 0xBF] + (3..<31).map { UInt8($0 * 7 & 0xFF) } + [0x10]

    private func openWithEnvironment(_ value: String, variable: String, root: String) throws -> SQLiteKeystore {
        setenv(variable, value, 1)
        return try open(root, .environment(variable: variable))
    }

    func testEnvironmentKeyAcceptsCanonicalBase64WithSurroundingWhitespace() async throws {
        let temporary = try TemporaryRoot()
        let variable = environmentVariable()
        let canonical = Data(canonicalKey).base64EncodedString()
        XCTAssertEqual(canonical.count, 44)
        try await open(temporary.root, .raw(canonicalKey)).set(bytes("value"), forKey: "k")
        for value in [canonical, " \(canonical)", "\(canonical)\n", "\t \(canonical) \r\n", "\n\n\(canonical)\t"] {
            let keystore = try openWithEnvironment(value, variable: variable, root: temporary.root)
            let read = try await keystore.value(forKey: "k")
            XCTAssertEqual(string(read), "value", value.debugDescription)
        }
    }

    func testEnvironmentKeyRejectsNonCanonicalBase64WithoutEchoingIt() throws {
        let temporary = try TemporaryRoot()
        let variable = environmentVariable()
        let canonical = Data(canonicalKey).base64EncodedString()
        let symbols = Array(canonical)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        // The last symbol before `=` carries 2 unused bits; setting one gives another text for
        // the same 32 bytes, which a lenient decoder would accept.
        let lastValue = try XCTUnwrap(alphabet.firstIndex(of: symbols[42]))
        XCTAssertEqual(lastValue & 3, 0)
        let spareBits = String(symbols[..<42]) + String(alphabet[lastValue | 1]) + "="
        let middle = canonical.index(canonical.startIndex, offsetBy: 20)
        let invalid: [(String, String)] = [
            ("space inside", String(canonical[..<middle]) + " " + String(canonical[middle...])),
            ("newline inside", String(canonical[..<middle]) + "\n" + String(canonical[middle...])),
            ("tab inside", String(canonical[..<middle]) + "\t" + String(canonical[middle...])),
            ("extra padding", canonical + "="),
            ("extra padding after whitespace", canonical + " ="),
            ("no padding", String(canonical.dropLast())),
            ("url-safe alphabet", canonical.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")),
            ("non-zero unused bits", spareBits),
            ("padding in the middle", String(canonical.dropLast(4)) + "=" + String(canonical.suffix(3))),
            ("33 bytes", Data(canonicalKey + [1]).base64EncodedString()),
            ("31 bytes", Data(canonicalKey.dropLast()).base64EncodedString()),
            ("only whitespace", " \t\n"),
            ("empty", ""),
            ("not base64", "not base64 !!"),
        ]
        for (what, value) in invalid {
            let error = assertThrows(KeystoreError.self, code: .invalidKey) { try openWithEnvironment(value, variable: variable, root: temporary.root) }
            let description = error?.description ?? ""
            XCTAssertTrue(description.contains(variable), "\(what): the error names the variable")
            let trimmed = value.trimmingCharacters(in: .whitespacesAndNewlines)
            if !trimmed.isEmpty {
                XCTAssertFalse(description.contains(trimmed), "\(what): the error echoes the value")
            }
            // Nor any 16-character run of the key.
            for start in stride(from: 0, through: canonical.count - 16, by: 4) {
                let run = String(Array(canonical)[start..<start + 16])
                XCTAssertFalse(description.contains(run), "\(what): the error holds part of the key")
            }
        }
    }

    // MARK: scrypt parameters stored with the salt

    private func derivedKey(_ keystore: SQLiteKeystore) -> [UInt8] {
        keystore.namespace.keys.sealing.withUnsafeBytes { Array($0) }
    }

    private func scrypt(_ passphrase: String, salt: [UInt8], log2N: Int, r: UInt64 = 8, p: UInt64 = 1) throws -> [UInt8] {
        try Array(passphrase.utf8).withUnsafeBytes {
            try KeyDerivation.scrypt(password: $0, salt: salt, n: 1 << UInt64(log2N), r: r, p: p, length: 32)
        }
    }

    func testNewSaltFileRecordsScryptParametersWithTheSalt() throws {
        let temporary = try TemporaryRoot()
        let passphrase = "new salt file"
        let keystore = try open(temporary.root, .passphrase(passphrase))
        let salt = try XCTUnwrap(FileManager.default.contents(atPath: try layout(temporary.root).saltPath(.none))).map { $0 }
        XCTAssertEqual(salt.count, 5 + 16, "header and 16-byte salt")
        XCTAssertEqual(Array(salt[1...4]), [1, 17, 8, 1], "version 1, N = 2^17, r = 8, p = 1")
        // The key is scrypt with exactly those parameters over the stored salt.
        XCTAssertEqual(derivedKey(keystore), try scrypt(passphrase, salt: Array(salt[5...]), log2N: 17))
        XCTAssertNotEqual(derivedKey(keystore), try scrypt(passphrase, salt: Array(salt[5...]), log2N: 15))
    }

    func testLegacySaltFileKeepsOpeningItemsSealedUnderTheOldDerivation() async throws {
        let temporary = try TemporaryRoot()
        let passphrase = "legacy salt file"
        // A keystore as an earlier release left it: a bare 16-byte salt, items sealed with
        // scrypt(N = 2^15, r = 8, p = 1).
        let legacySalt = (0..<16).map { _ in UInt8.random(in: 0...255) }
        let legacyKey = try scrypt(passphrase, salt: legacySalt, log2N: 15)
        let old = try open(temporary.root, .raw(legacyKey))
        let saltPath = try layout(temporary.root).saltPath(.none)
        XCTAssertTrue(FileManager.default.createFile(atPath: saltPath, contents: Data(legacySalt), attributes: [.posixPermissions: 0o600]))
        try await old.set(bytes("sealed long ago"), forKey: "k")
        old.close()

        let keystore = try open(temporary.root, .passphrase(passphrase))
        XCTAssertEqual(derivedKey(keystore), legacyKey)
        let oldValue = try await keystore.value(forKey: "k")
        XCTAssertEqual(string(oldValue), "sealed long ago")
        try await keystore.set(bytes("sealed now"), forKey: "k2")
        let newValue = try await open(temporary.root, .passphrase(passphrase)).value(forKey: "k2")
        XCTAssertEqual(string(newValue), "sealed now")
        // The legacy file is read, never rewritten.
        XCTAssertEqual(FileManager.default.contents(atPath: saltPath).map(Array.init), legacySalt)
    }

    /// A shared group's directory is writable by every member: one who plants a bare 16-byte
    /// salt before the group's first use would choose the salt and the legacy, cheaper cost of
    /// everything sealed there afterwards. Such a salt is taken only where items sealed under
    /// it already exist.
    func testAHeaderlessSaltInASharedGroupIsTakenOnlyWhereItsItemsExist() async throws {
        let passphrase = "planted salt"
        let team = AccessGroup(name: "team")
        let planted = try TemporaryRoot()
        let layout = try layout(planted.root)
        XCTAssertTrue(try layout.prepareDirectories(team, create: true))
        let saltPath = layout.saltPath(team)
        let plantedSalt = [UInt8](repeating: 0x42, count: 16)
        XCTAssertTrue(FileManager.default.createFile(atPath: saltPath, contents: Data(plantedSalt), attributes: [.posixPermissions: 0o640]))
        let refused = assertThrows(KeystoreError.self, code: .corruptFormat) {
            try SQLiteKeystore(root: planted.root, service: "tool", accessGroup: team, keySource: .passphrase(passphrase))
        }
        XCTAssertEqual(refused?.path, saltPath)
        XCTAssertTrue(refused?.reason.contains("no header") ?? false, String(describing: refused))

        // A group an earlier release sealed items in with such a salt keeps opening: where the
        // service's database holds a key check, where it holds items but no check (releases
        // before the check), and for another service of the group, whose database is new
        // (the salt is the group's, every service's).
        let legacy = try TemporaryRoot()
        let legacyLayout = try self.layout(legacy.root)
        let legacyKey = try scrypt(passphrase, salt: plantedSalt, log2N: 15)
        let old = try SQLiteKeystore(root: legacy.root, service: "tool", accessGroup: team, keySource: .raw(legacyKey))
        try await old.set(bytes("sealed long ago"), forKey: "k")
        let database = old.namespace.databasePath
        old.close()
        XCTAssertTrue(FileManager.default.createFile(
            atPath: legacyLayout.saltPath(team), contents: Data(plantedSalt), attributes: [.posixPermissions: 0o640]))
        for keyCheck in ["kept", "removed"] {
            if keyCheck == "removed" { try plainSQLite(database, "DELETE FROM meta WHERE name = 'key_check'") }
            let keystore = try SQLiteKeystore(root: legacy.root, service: "tool", accessGroup: team, keySource: .passphrase(passphrase))
            let value = try await keystore.value(forKey: "k")
            XCTAssertEqual(string(value), "sealed long ago", "key check \(keyCheck)")
            keystore.close()
        }
        let other = try SQLiteKeystore(root: legacy.root, service: "other-tool", accessGroup: team, keySource: .passphrase(passphrase))
        try await other.set(bytes("new"), forKey: "k")
        other.close()
    }

    /// A store an earlier release sealed under an empty passphrase can still be opened (and
    /// migrated to another key): only a new salt is refused one.
    func testAnEmptyPassphraseOpensAStoreWhoseSaltExists() async throws {
        let temporary = try TemporaryRoot()
        let key = try scrypt("", salt: Array(repeating: 7, count: 16), log2N: 15)
        let old = try open(temporary.root, .raw(key))
        try await old.set(bytes("sealed under nothing"), forKey: "k")
        old.close()
        XCTAssertTrue(FileManager.default.createFile(
            atPath: try layout(temporary.root).saltPath(.none), contents: Data(Array(repeating: 7, count: 16)),
            attributes: [.posixPermissions: 0o600]))
        let keystore = try open(temporary.root, .passphrase(""))
        let value = try await keystore.value(forKey: "k")
        XCTAssertEqual(string(value), "sealed under nothing")
    }

    func testDamagedSaltFileIsRefused() throws {
        let passphrase = "damaged salt file"
        func open(_ root: String) throws -> SQLiteKeystore {
            try self.open(root, .passphrase(passphrase))
        }
        let reference = try TemporaryRoot()
        _ = try open(reference.root)
        let good = try XCTUnwrap(FileManager.default.contents(atPath: try layout(reference.root).saltPath(.none))).map { $0 }

        var unknownVersion = good
        unknownVersion[1] &+= 1
        var badMagic = good
        badMagic[0] ^= 0xFF
        var tooCheap = good
        tooCheap[2] = 10
        var tooExpensive = good
        tooExpensive[2] = 40
        let cases: [(String, [UInt8])] = [
            ("truncated header", Array(good.prefix(3))),
            ("truncated salt", Array(good.dropLast())),
            ("trailing bytes", good + [0]),
            ("empty", []),
            ("unknown version", unknownVersion),
            ("not a salt file", badMagic),
            ("downgraded cost", tooCheap),
            ("excessive cost", tooExpensive),
        ]
        for (what, contents) in cases {
            let temporary = try TemporaryRoot()
            _ = try open(temporary.root)
            let saltPath = try layout(temporary.root).saltPath(.none)
            XCTAssertTrue(FileManager.default.createFile(atPath: saltPath, contents: Data(contents), attributes: [.posixPermissions: 0o600]))
            let error = assertThrows(KeystoreError.self, code: .corruptFormat) { try open(temporary.root) }
            XCTAssertEqual(error?.path, saltPath, what)
            XCTAssertTrue(error?.reason.contains("salt file") ?? false, "\(what): \(error?.reason ?? "")")
            XCTAssertFalse(error?.description.contains(passphrase) ?? true, what)
        }
    }

    func testScryptMatchesRFC7914() throws {
        // RFC 7914 §12: scrypt("password", "NaCl", N=1024, r=8, p=16, dkLen=64).
        let output = try Array("password".utf8).withUnsafeBytes {
            try KeyDerivation.scrypt(password: $0, salt: Array("NaCl".utf8), n: 1024, r: 8, p: 16, length: 64)
        }
        XCTAssertEqual(output, hexBytes("fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b3731622eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640"))
    }
}
