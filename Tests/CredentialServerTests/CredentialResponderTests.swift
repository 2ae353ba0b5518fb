import BrokerTestSupport
@testable import CredentialServer
import Federation
import Foundation
import XCTest

/// The server's pieces without a socket: how failures map to statuses, the document's
/// `Expiration`, and who waits for the port.
final class CredentialResponderTests: XCTestCase {
    func testEveryFailureMapsToItsStatusAndCode() {
        let cases: [(FederationError.Code, Int, String)] = [
            (.noValidCredentials, 404, "NoValidCredentials"),
            (.identityTerminated, 410, "IdentityTerminated"),
            (.storage, 503, "KeystoreUnavailable"),
            // Anything else the client may throw is the server's own failure, never a 4xx
            // that tells the SDK to give up on a healthy session.
            (.cancelled, 500, "InternalError"),
            (.network, 500, "InternalError"),
        ]
        for (code, status, name) in cases {
            let (answered, shown, message) = CredentialResponder.refusal(FederationError(code: code, message: "m"), session: "alice")
            // The status prints as its code and reason phrase.
            XCTAssertTrue("\(answered)".hasPrefix("\(status) "), "\(code): \(answered)")
            XCTAssertEqual(shown, name, "\(code)")
            XCTAssertTrue(message.contains("'alice'"), message)
        }
    }

    /// Whole seconds, rounded down, in UTC with a `Z`: what the SDKs' container provider reads.
    func testTheExpirationIsSentInWholeSecondsUTC() {
        let credentials = AWSCredentials(
            accessKeyId: "ASIAEXAMPLE", secretAccessKey: "secret", sessionToken: "token",
            expiration: Date(timeIntervalSince1970: 1_795_000_000.999))
        let body = ContainerCredentialsBody.Credentials(credentials)
        XCTAssertEqual(body.expiration, "2026-11-18T11:06:40Z")
    }

    /// A caller waiting for the port when the server stops (it could not listen, or was
    /// shut down first) gets `notRunning`, never a port.
    func testAWaiterForThePortGetsNotRunningWhenTheServerStops() async {
        for started in [false, true] {
            let state = ListeningState()
            if started { XCTAssertTrue(state.start()) }
            let waiting = Task { () -> CredentialServerError.Code? in
                do throws(CredentialServerError) {
                    _ = try await state.port()
                    return nil
                } catch {
                    return error.code
                }
            }
            let registered = await eventually(timeout: .seconds(10)) { state.waiting == 1 }
            XCTAssertTrue(registered, "the caller never waited for the port")
            state.stopped()
            let code = await waiting.value
            XCTAssertEqual(code, .notRunning, "a stopped server gave a port, or another error")
            XCTAssertFalse(state.start(), "a stopped server started again")
        }
    }

    func testAWaiterForThePortGetsItOnceListening() async throws {
        let state = ListeningState()
        XCTAssertTrue(state.start())
        let waiting = Task { try await state.port() }
        let registered = await eventually(timeout: .seconds(10)) { state.waiting == 1 }
        XCTAssertTrue(registered, "the caller never waited for the port")
        state.listening(port: 4711)
        let port = try await waiting.value
        XCTAssertEqual(port, 4711)
        let later = try await state.port()
        XCTAssertEqual(later, 4711)
    }
}
