import Foundation
import XCTest

/// What a test throws when something it needs is missing from this machine: a skip with
/// `message`, except where `CI=true`, which promises everything is installed: there it
/// records `message` as a failure and throws, so that nothing a CI run was meant to cover
/// passes by being skipped.
package func missingPrerequisite(_ message: String, file: StaticString = #filePath, line: UInt = #line) -> any Error {
    guard ProcessInfo.processInfo.environment["CI"] == "true" else { return XCTSkip(message) }
    XCTFail(message + " (CI=true: required)", file: file, line: line)
    return MissingPrerequisiteError(message: message)
}

/// The error ``missingPrerequisite(_:file:line:)`` throws where `CI=true`.
package struct MissingPrerequisiteError: Error, CustomStringConvertible {
    package let message: String
    package var description: String { message }
}
