import BrokerTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A `federate` run that goes on while the test works: `exec` with a long-lived command,
/// or `serve`. Its stdout and stderr go to files the test reads as they grow; once it exits,
/// ``waitForExit(timeout:file:line:)`` checks them for leaks as the harness checks its runs.
final class BackgroundFederate {
    let arguments: [String]
    /// Whose `neverPrinted` and `notOnStderr` the outputs are checked against, as they are
    /// when the run ends (a test may add secrets after starting it).
    private let harness: FederateHarness
    private let process = Process()
    private let outPath: String
    private let errPath: String
    private var handles: [FileHandle] = []

    /// - Parameter outputPermissions: The mode of the files stdout and stderr go to (only the
    ///   user may read them, as `serve`'s token file should be, unless a test says otherwise).
    init(
        _ harness: FederateHarness, _ arguments: [String], environment overrides: [String: String?] = [:],
        outputPermissions: Int = 0o600
    ) throws {
        self.arguments = arguments
        self.harness = harness
        let tag = UUID().uuidString
        outPath = harness.directory + "/.bg-out-\(tag)"
        errPath = harness.directory + "/.bg-err-\(tag)"
        for path in [outPath, errPath] {
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            try FileManager.default.setAttributes([.posixPermissions: outputPermissions], ofItemAtPath: path)
        }
        process.executableURL = URL(fileURLWithPath: harness.binary)
        process.arguments = arguments
        var environment = harness.environment
        for (name, value) in overrides { environment[name] = value }
        process.environment = environment
        process.currentDirectoryURL = URL(fileURLWithPath: harness.directory)
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: outPath))
        let err = try FileHandle(forWritingTo: URL(fileURLWithPath: errPath))
        handles = [out, err]
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        for handle in handles { try? handle.close() }
        try? FileManager.default.removeItem(atPath: outPath)
        try? FileManager.default.removeItem(atPath: errPath)
    }

    var pid: Int32 { process.processIdentifier }
    var stdout: String { (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "" }

    /// The complete lines on stdout so far.
    var stdoutLines: [String] {
        let text = stdout
        guard let end = text.lastIndex(of: "\n") else { return [] }
        return text[..<end].split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }

    /// Waits until stdout holds `count` complete lines (or the process ended, or `timeout`).
    @discardableResult
    func waitForLines(_ count: Int, timeout: TimeInterval = 60, file: StaticString = #filePath, line: UInt = #line) -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        while stdoutLines.count < count && Date() < deadline {
            if !process.isRunning {
                // Read once more: the last lines may have landed as it exited.
                break
            }
            usleep(10_000)
        }
        let lines = stdoutLines
        if lines.count < count {
            XCTFail("expected \(count) lines on stdout of federate \(arguments.joined(separator: " ")), got \(lines.count); stderr: \(stderr.suffix(600))", file: file, line: line)
        }
        return lines
    }

    func signal(_ signal: Int32) {
        kill(process.processIdentifier, signal)
    }

    /// Whether the process still runs.
    var isRunning: Bool { process.isRunning }

    /// Waits for the exit and returns the status as a shell reports it (128 + signal); then
    /// checks the outputs for leaks (``checkLeaks(file:line:)``).
    func waitForExit(timeout: TimeInterval = 60, file: StaticString = #filePath, line: UInt = #line) -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(5_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            XCTFail("federate \(arguments.joined(separator: " ")) did not exit within \(timeout) s; stderr: \(stderr.suffix(600))", file: file, line: line)
        }
        process.waitUntilExit()
        checkLeaks(file: file, line: line)
        return process.terminationReason == .exit ? process.terminationStatus : 128 + process.terminationStatus
    }

    /// `FederateHarness`'s check of a finished run, which a run in the background bypasses:
    /// not even 16 characters of `neverPrinted` on stdout or stderr, nor of `notOnStderr` on
    /// stderr, nor on stdout except where the harness allows credentials (`login`, `guest`,
    /// `credentials`) and for `exec`, whose stdout is its command's: tests have the command
    /// print the credentials it fetched. `serve`'s stdout is checked: its two exports hold
    /// its own authorization token, which is on neither list.
    private func checkLeaks(file: StaticString, line: UInt) {
        let command = arguments.first ?? ""
        let printsCredentials = ["login", "guest", "credentials", "exec"].contains(command)
        let out = stdout
        let err = stderr
        let never = harness.neverPrinted.filter { !$0.isEmpty }
        XCTAssertNil(leakedRun(in: out, of: never), "a secret leaked to stdout of background \(command)", file: file, line: line)
        XCTAssertNil(leakedRun(in: err, of: never), "a secret leaked to stderr of background \(command)", file: file, line: line)
        let credentials = harness.notOnStderr.filter { !$0.isEmpty }
        XCTAssertNil(leakedRun(in: err, of: credentials), "a credential leaked to stderr of background \(command)", file: file, line: line)
        if !printsCredentials {
            XCTAssertNil(leakedRun(in: out, of: credentials), "a credential leaked to stdout of background \(command)", file: file, line: line)
        }
    }
}

extension BackgroundFederate {
    /// The endpoint `serve` printed: its URL and token.
    func servedEndpoint(file: StaticString = #filePath, line: UInt = #line) throws -> (url: String, token: String) {
        let lines = waitForLines(2, file: file, line: line)
        XCTAssertEqual(lines.count, 2, "serve printed: \(lines); stderr: \(stderr)", file: file, line: line)
        let pattern = #"^export (AWS_CONTAINER_CREDENTIALS_FULL_URI|AWS_CONTAINER_AUTHORIZATION_TOKEN)='([^']+)'$"#
        let regex = try NSRegularExpression(pattern: pattern)
        var values: [String: String] = [:]
        for text in lines {
            let match = try XCTUnwrap(regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)), text, file: file, line: line)
            let name = String(text[Range(match.range(at: 1), in: text)!])
            values[name] = String(text[Range(match.range(at: 2), in: text)!])
        }
        return (try XCTUnwrap(values["AWS_CONTAINER_CREDENTIALS_FULL_URI"], file: file, line: line),
                try XCTUnwrap(values["AWS_CONTAINER_AUTHORIZATION_TOKEN"], file: file, line: line))
    }
}
