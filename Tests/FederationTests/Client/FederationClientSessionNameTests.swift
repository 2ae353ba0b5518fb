import BrokerTestSupport
@testable import Federation
import Foundation
import XCTest

/// Session names are validated before anything happens.
final class FederationClientSessionNameTests: XCTestCase {
    func testInvalidSessionNamesAreRejectedWithoutNetwork() async throws {
        let harness = try Harness()
        let invalid = ["", String(repeating: "a", count: 129), "has space", "slash/name", "../escape", "émile", "tab\tname", "new\nline", "semi;colon"]
        for name in invalid {
            await assertThrows(FederationError.self, code: .invalidConfiguration) {
                try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: name)
            }
            await assertThrows(FederationError.self, code: .invalidConfiguration) { try await harness.client.federateAsGuest(session: name) }
        }
        XCTAssertEqual(harness.fake.calls.count, 0)
    }

    func testValidSessionNamesAreAccepted() async throws {
        let harness = try Harness()
        let valid = ["default", "alice", "user-42", "a.b_c", "alice@example.com", "k=v,x:y+z", String(repeating: "a", count: 128)]
        for name in valid {
            try await harness.client.federate(token: "opaque", provider: .facebook, session: name)
        }
        let names = try await harness.client.sessionNames()
        XCTAssertEqual(names, valid.sorted())
    }
}
