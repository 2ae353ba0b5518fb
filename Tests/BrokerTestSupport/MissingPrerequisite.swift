import Foundation
import XCTest

/// What a test throws when something it needs is missing from this machine: a skip with
/// `message`, except on CI (`CI` set to anything but empty, `false` or `0`, as CI services
/// set it), which promises everything is installed: there it records `message` as a failure
/// and throws, so that nothing a CI run was meant to cover passes by being skipped.
package func missingPrerequisite(_ message: String, file: StaticString = #filePath, line: UInt = #line) -> any Error {
    guard let ci = ProcessInfo.processInfo.environment["CI"], !["", "false", "0"].contains(ci) else { return XCTSkip(message) }
    XCTFail(message + " (CI=\(ci): required)", file: file, line: line)
    return MissingPrerequisiteError(message: message)
}

/// The error ``missingPrerequisite(_:file:line:)`` throws where `CI=true`.
package struct MissingPrerequisiteError: Error, CustomStringConvertible {
    package let message: String
    package var description: String { message }
}
