@testable import FederateCLI
import Federation
import SecureStorage
import XCTest

/// Every `FederationError.Code` maps to the exit status docs/cli.md documents for it,
/// so a new code cannot fall through to exit 1 unnoticed.
final class ExitStatusMappingTests: XCTestCase {
    /// docs/cli.md, "Exit codes". Internal (1): `cancelled` (the CLI never cancels a call
    /// itself) and `cryptoFailure` (libcrypto failing is a bug or a broken system).
    private let documented: [FederationError.Code: ExitStatus] = [
        .invalidToken: .usage,
        .invalidConfiguration: .usage,
        .sessionConflict: .usage,
        .noValidCredentials: .noValidCredentials,
        .notAuthorized: .rejected,
        .identityTerminated: .rejected,
        .resourceNotFound: .rejected,
        .resourceConflict: .rejected,
        .limitExceeded: .rejected,
        .invalidParameter: .rejected,
        .invalidIdentityPoolConfiguration: .rejected,
        .developerUserAlreadyRegistered: .rejected,
        .serviceError: .rejected,
        .throttled: .unavailable,
        .serviceUnavailable: .unavailable,
        .timedOut: .unavailable,
        .network: .unavailable,
        .invalidResponse: .unavailable,
        .externalService: .unavailable,
        .storage: .keystore,
        .cancelled: .internalError,
        .cryptoFailure: .internalError,
        .regionDisabled: .rejected,
    ]

    func testEveryCodeHasItsDocumentedExitStatus() {
        XCTAssertFalse(FederationError.Code.allCases.isEmpty)
        for code in FederationError.Code.allCases {
            guard let expected = documented[code] else {
                XCTFail("FederationError.Code.\(code) has no documented exit status: add it to docs/cli.md, CLIFailure.federation and this table")
                continue
            }
            let failure = CLIFailure.federation(
                FederationError(code: code, message: "m", serviceErrorType: "SomeException", httpStatus: 400), root: "/k")
            XCTAssertEqual(failure.status, expected, "\(code): \(failure.message)")
            if expected != .internalError {
                XCTAssertFalse(failure.message.contains("please report it"), "\(code) is reported as a bug: \(failure.message)")
            }
        }
    }

    /// A 4xx without an AWS error type did not come from the service (a wrong endpoint).
    func testAServiceErrorWithoutATypeIsAWrongEndpoint() {
        let failure = CLIFailure.federation(FederationError(code: .serviceError, message: "m", httpStatus: 404), root: "/k")
        XCTAssertEqual(failure.status, .unavailable)
        XCTAssertTrue(failure.message.contains("--endpoint"), failure.message)
        let sts = CLIFailure.federation(
            FederationError(code: .serviceError, message: "m", operation: "AssumeRoleWithWebIdentity", httpStatus: 404), root: "/k")
        XCTAssertTrue(sts.message.contains("STS") && sts.message.contains("--sts-endpoint"), sts.message)
        let tooLarge = CLIFailure.federation(FederationError(code: .serviceError, message: "m", httpStatus: 413), root: "/k")
        XCTAssertEqual(tooLarge.status, .rejected, "413 is about the request (the token's size), not the endpoint")
    }

    func testAnUnknownServiceErrorWithA5xxIsUnavailable() {
        let failure = CLIFailure.federation(FederationError(code: .serviceError, message: "m", httpStatus: 503), root: "/k")
        XCTAssertEqual(failure.status, .unavailable)
    }

    func testASessionConflictSaysToClearTheSessionFirst() {
        let failure = CLIFailure.federation(FederationError(code: .sessionConflict, message: "session 'a' holds a login"), root: "/k")
        XCTAssertEqual(failure.status, .usage)
        XCTAssertTrue(failure.message.contains("federate clear"), failure.message)
    }
}
