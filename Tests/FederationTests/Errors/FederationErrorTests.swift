@testable import Federation
import XCTest

/// ``FederationError``: its description and its codes.
final class FederationErrorTests: XCTestCase {
    func testErrorDescriptionCarriesTheServiceContext() {
        let error = FederationError(
            code: .notAuthorized, message: "rejected", operation: "GetId", serviceErrorType: "NotAuthorizedException",
            serviceMessage: "Invalid login token.", httpStatus: 400)
        XCTAssertEqual(
            error.description,
            "notAuthorized: rejected; operation: GetId; service error: NotAuthorizedException; service message: Invalid login token.; HTTP 400")
        XCTAssertTrue(error.debugDescription.contains(error.description))
    }

    func testErrorCodesAreDistinctAndNamed() {
        let named: [FederationError.Code] = [
            .notAuthorized, .identityTerminated, .resourceNotFound, .resourceConflict, .throttled, .limitExceeded, .invalidParameter,
            .invalidIdentityPoolConfiguration, .externalService, .developerUserAlreadyRegistered, .serviceError, .serviceUnavailable,
            .timedOut, .network, .invalidResponse, .invalidToken, .invalidConfiguration, .cancelled, .noValidCredentials, .storage,
            .sessionConflict, .cryptoFailure, .regionDisabled,
        ]
        let codes = FederationError.Code.allCases
        XCTAssertEqual(named.count, Set(named).count, "no code is listed twice")
        XCTAssertEqual(Set(named), Set(codes), "every public code is listed here, and no other")
        XCTAssertEqual(Set(codes).count, codes.count)
        XCTAssertEqual(Set(codes.map(\.description)).count, codes.count)
        XCTAssertEqual(FederationError.Code.identityTerminated.description, "identityTerminated")
    }
}
