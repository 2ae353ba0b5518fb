package import SecureStorage
import XCTest

/// Two keys Swift calls equal (canonically equivalent: `"caf\u{E9}"` and `"cafe\u{301}"`)
/// but whose bytes differ are two items in every engine: each reads its own value, also when
/// both are read at once (a combined read), both are listed, both changes are reported, even
/// from one commit, and removing one leaves the other.
package func assertCanonicallyEquivalentKeysAreTwoItems(
    _ keystore: any Keystore, file: StaticString = #filePath, line: UInt = #line
) async throws {
    let composed = "item.caf\u{E9}"
    let decomposed = "item.cafe\u{301}"
    XCTAssertEqual(composed, decomposed, "Swift's String equality is canonical equivalence", file: file, line: line)
    XCTAssertNotEqual(Array(composed.utf8), Array(decomposed.utf8), file: file, line: line)

    let changes = keystore.changes()
    var batch = KeystoreBatch()
    batch.set([1], forKey: composed)
    batch.set([2], forKey: decomposed)
    try await keystore.commit(batch)

    let heard = Task { () -> Set<[UInt8]> in
        var keys: Set<[UInt8]> = []
        for await change in changes {
            guard case .item(let key) = change else { continue }
            keys.insert(Array(key.utf8))
            if keys.count == 2 { break }
        }
        return keys
    }
    let timeout = Task {
        try? await Task.sleep(for: .seconds(10))
        heard.cancel()
    }
    let heardKeys = await heard.value
    timeout.cancel()
    XCTAssertEqual(heardKeys, [Array(composed.utf8), Array(decomposed.utf8)], "a change of each key is reported", file: file, line: line)

    for _ in 0..<3 {
        // At once, so that an engine that combines concurrent reads reads both in one statement.
        async let first = keystore.value(forKey: composed)
        async let second = keystore.value(forKey: decomposed)
        let (a, b) = try await (first, second)
        XCTAssertEqual(a, [1], "the composed key's own value", file: file, line: line)
        XCTAssertEqual(b, [2], "the decomposed key's own value", file: file, line: line)
    }
    let listed = try await keystore.keys().filter { $0.hasPrefix("item.") }
    XCTAssertEqual(Set(listed.map { Array($0.utf8) }), [Array(composed.utf8), Array(decomposed.utf8)], file: file, line: line)

    try await keystore.remove(forKey: composed)
    let kept = try await keystore.value(forKey: decomposed)
    XCTAssertEqual(kept, [2], "removing one key removed the other", file: file, line: line)
    let removed = try await keystore.value(forKey: composed)
    XCTAssertNil(removed, file: file, line: line)
}

/// What no engine stores is refused by every engine alike, an in-memory one included: an
/// empty key, one over 180 bytes or with a NUL (`invalidName`, also for a read), a value too large to
/// seal (`valueTooLarge`); and a batch holding one of them applies none of its operations.
package func assertRefusesWhatNoEngineStores(
    _ keystore: any Keystore, file: StaticString = #filePath, line: UInt = #line
) async throws {
    await assertThrows(KeystoreError.self, code: .invalidName, file: file, line: line) { try await keystore.set([1], forKey: "") }
    await assertThrows(KeystoreError.self, code: .invalidName, file: file, line: line) {
        try await keystore.set([1], forKey: String(repeating: "k", count: 181))
    }
    await assertThrows(KeystoreError.self, code: .invalidName, file: file, line: line) { try await keystore.value(forKey: "") }
    await assertThrows(KeystoreError.self, code: .invalidName, file: file, line: line) { try await keystore.set([1], forKey: "a\u{0}b") }
    try await keystore.set([1], forKey: String(repeating: "k", count: 180))
    await assertThrows(KeystoreError.self, code: .valueTooLarge, file: file, line: line) {
        try await keystore.set([UInt8](repeating: 7, count: 1 << 20), forKey: "large")
    }
    var batch = KeystoreBatch()
    batch.set([2], forKey: "valid")
    batch.set([3], forKey: "")
    await assertThrows(KeystoreError.self, code: .invalidName, file: file, line: line) { try await keystore.commit(batch) }
    let valid = try await keystore.value(forKey: "valid")
    XCTAssertNil(valid, "a refused batch applied part of itself", file: file, line: line)
    let large = try await keystore.value(forKey: "large")
    XCTAssertNil(large?.count, "a value too large to seal was stored", file: file, line: line)
}
