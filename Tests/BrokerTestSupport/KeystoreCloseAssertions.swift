package import SecureStorage
import XCTest

/// Closes `keystore` through the ``Keystore`` protocol (as code holding an `any Keystore`
/// does) and asserts what the protocol promises: a change stream opened before ends, and
/// every later call fails with `storeUnavailable`; closing again does nothing.
package func assertClosingThroughTheProtocol(
    _ keystore: any Keystore, file: StaticString = #filePath, line: UInt = #line
) async throws {
    try await keystore.set(Array("value".utf8), forKey: "item")
    let stream = keystore.changes()
    let ended = Task {
        for await _ in stream {}
        return !Task.isCancelled  // cancelled by the timeout below: the stream did not end
    }
    await keystore.close()
    let timeout = Task {
        try? await Task.sleep(for: .seconds(10))
        ended.cancel()
    }
    let streamEnded = await ended.value
    timeout.cancel()
    XCTAssertTrue(streamEnded, "the change stream did not end", file: file, line: line)

    func assertUnavailable(_ what: String, _ call: () async throws -> Void) async {
        do {
            try await call()
            XCTFail("\(what) after close succeeded", file: file, line: line)
        } catch let error as KeystoreError {
            XCTAssertEqual(error.code, .storeUnavailable, "\(what): \(error)", file: file, line: line)
        } catch {
            XCTFail("\(what): \(error)", file: file, line: line)
        }
    }
    await assertUnavailable("a read") { _ = try await keystore.value(forKey: "item") }
    await assertUnavailable("a listing") { _ = try await keystore.keys() }
    await assertUnavailable("a commit") { try await keystore.set(Array("other".utf8), forKey: "item") }
    await keystore.close()
}
