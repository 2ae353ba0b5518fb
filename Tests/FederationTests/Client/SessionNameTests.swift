import BrokerTestSupport
@testable import Federation
import XCTest

/// One rule for session names, applied by every call that takes one.
final class SessionNameTests: XCTestCase {
    private let bad = ["", "../x", "/", "a/b", String(repeating: "a", count: 129), "a\nb", ".", "..", "a b", "é", "a\u{0}b"]
    private let good = ["default", "alice", "user-42", "a.b@example.com", "us-east-1:abc", String(repeating: "a", count: 128), "..."]

    func testTheRule() {
        for name in bad {
            XCTAssertThrowsError(try SessionName.validate(name), name.debugDescription)
        }
        for name in good {
            XCTAssertNoThrow(try SessionName.validate(name), name)
        }
    }

    func testTheMessageShowsNoRawControlCharacters() {
        do {
            try SessionName.validate("evil\nline")
            XCTFail("accepted")
        } catch {
            XCTAssertEqual(error.code, .invalidConfiguration)
            XCTAssertFalse(error.message.contains("\n"), error.message)
        }
    }

    func testEveryCallThatTakesASessionChecksIt() async throws {
        let harness = try Harness()
        for name in bad {
            await assertThrows(FederationError.self, code: .invalidConfiguration) {
                try await harness.client.federate(token: "opaque-token", provider: .facebook, session: name)
            }
            await assertThrows(FederationError.self, code: .invalidConfiguration) { try await harness.client.federateAsGuest(session: name) }
            await assertThrows(FederationError.self, code: .invalidConfiguration) { try await harness.client.clear(session: name) }
        }
        XCTAssertTrue(harness.fake.calls.isEmpty)
    }
}
