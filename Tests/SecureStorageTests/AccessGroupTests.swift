import XCTest
@testable import SecureStorage

/// An access group is identity only: a name, or none; equality and hashing are by name.
final class AccessGroupTests: XCTestCase {
    func testEqualityIsByName() {
        XCTAssertEqual(AccessGroup(name: "team"), AccessGroup(name: "team"))
        XCTAssertNotEqual(AccessGroup(name: "team"), AccessGroup(name: "Team"))
        XCTAssertNotEqual(AccessGroup.none, AccessGroup(name: "team"))
        // A group literally named "none" is a shared group, not the private namespace.
        XCTAssertNotEqual(AccessGroup.none, AccessGroup(name: "none"))
        XCTAssertEqual(Set([AccessGroup(name: "team"), AccessGroup(name: "team"), .none]).count, 2)
        XCTAssertNil(AccessGroup.none.name)
        XCTAssertFalse(AccessGroup.none.isShared)
        XCTAssertTrue(AccessGroup(name: "team").isShared)
        XCTAssertEqual("\(AccessGroup.none)", "none")
        XCTAssertEqual("\(AccessGroup(name: "team"))", "team")
    }

    /// Names are compared as bytes, as every engine keeps them: `café` with a precomposed
    /// `é` and with `e` and a combining accent are two groups (String's `==` takes them for
    /// one, which made a migration between them move nothing).
    func testCanonicallyEquivalentNamesAreTwoGroups() {
        let composed = AccessGroup(name: "caf\u{E9}"), decomposed = AccessGroup(name: "cafe\u{301}")
        XCTAssertEqual(composed.name, decomposed.name, "String equality takes them for one")
        XCTAssertNotEqual(composed, decomposed)
        XCTAssertEqual(Set([composed, decomposed, AccessGroup(name: "caf\u{E9}")]).count, 2)
        XCTAssertEqual(composed, AccessGroup(name: "caf\u{E9}"))
    }

    func testTheRecordedGroupRoundTripsByName() {
        for group in [AccessGroup.none, AccessGroup(name: "team"), AccessGroup(name: "none"), AccessGroup(name: "ü/../x")] {
            XCTAssertEqual(StoreSchema.decodeGroup(StoreSchema.encode(group)), group)
        }
        XCTAssertNil(StoreSchema.decodeGroup("group:"), "an empty name is not a group")
    }
}
