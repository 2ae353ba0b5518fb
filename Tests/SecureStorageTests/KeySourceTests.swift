import Foundation
import XCTest
@testable import SecureStorage

final class KeySourceTests: XCTestCase {
    func testEnvironmentKey() throws {
        let temporary = try TemporaryRoot()
        let variable = "IB_TEST_KEY_\(getpid())"
        defer { unsetenv(variable) }
        let key = (0..<32).map { UInt8($0) }
        setenv(variable, Data(key).base64EncodedString(), 1)
        let keystore = try FileKeystore(root: temporary.root, service: "tool", keySource: .environment(variable: variable))
        try keystore.set(bytes("value"), forKey: "k")
        // The same key given raw opens the item: the environment key is used as is.
        let raw = try FileKeystore(root: temporary.root, service: "tool", keySource: .raw(key))
        XCTAssertEqual(string(try raw.data(forKey: "k")), "value")
        XCTAssertFalse(FileManager.default.fileExists(atPath: keystore.namespace.layout.keyFilePath(.none)))

        unsetenv(variable)
        _ = assertKeystoreError(.invalidKey) { try FileKeystore(root: temporary.root, service: "tool", keySource: .environment(variable: variable)) }
        let short = Data(key.prefix(16)).base64EncodedString()
        setenv(variable, short, 1)
        let error = assertKeystoreError(.invalidKey) { try FileKeystore(root: temporary.root, service: "tool", keySource: .environment(variable: variable)) }
        XCTAssertFalse(error?.description.contains(short) ?? true)
        setenv(variable, "not base64 !!", 1)
        _ = assertKeystoreError(.invalidKey) { try FileKeystore(root: temporary.root, service: "tool", keySource: .environment(variable: variable)) }
        XCTAssertEqual(KeySource.environment().description, "environment(IDENTITY_BROKER_KEY)")
    }

    func testPassphraseKey() throws {
        let temporary = try TemporaryRoot()
        let passphrase = "correct horse battery staple"
        let source = KeySource.passphrase(passphrase)
        XCTAssertFalse(source.description.contains(passphrase))
        let keystore = try FileKeystore(root: temporary.root, service: "tool", keySource: source)
        try keystore.set(bytes("value"), forKey: "k")
        let saltPath = keystore.namespace.layout.saltPath(.none)
        XCTAssertEqual(mode(of: saltPath), 0o600)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: saltPath)[.size] as? Int, 16)

        let again = try FileKeystore(root: temporary.root, service: "tool", keySource: .passphrase(passphrase))
        XCTAssertEqual(string(try again.data(forKey: "k")), "value")
        let wrong = try FileKeystore(root: temporary.root, service: "tool", keySource: .passphrase("pw-XYZZY-7"))
        let error = assertKeystoreError(.authenticationFailed) { try wrong.data(forKey: "k") }
        XCTAssertFalse(error?.description.contains("XYZZY") ?? true)
    }

    func testScryptMatchesRFC7914() throws {
        // RFC 7914 §12: scrypt("password", "NaCl", N=1024, r=8, p=16, dkLen=64).
        let output = try Array("password".utf8).withUnsafeBytes {
            try KeyDerivation.scrypt(password: $0, salt: Array("NaCl".utf8), n: 1024, r: 8, p: 16, length: 64)
        }
        XCTAssertEqual(output, hexBytes("fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b3731622eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640"))
    }
}
