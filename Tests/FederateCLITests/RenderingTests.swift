@testable import FederateCLI
import Foundation
import XCTest

/// `--format env` output is meant for `eval`: whatever a credential holds (it comes from the
/// identity service, which may be hostile), a POSIX shell must read back exactly that text.
final class RenderingTests: XCTestCase {
    func testShellQuotingRoundTripsThroughAShellWhateverTheText() throws {
        let hostile = [
            "plain",
            "it's",
            "'",
            "''",
            "a'\u{301}; touch pwned; '",  // a quote and a combining mark are one Character
            "'\u{20DD}$(touch pwned)",
            "`touch pwned`",
            "$HOME \\ \" \n tab\t",
            "é'\u{0327}\u{0301}x",
            "",
        ]
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rendering-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        for text in hostile {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "printf %s " + Rendering.shellQuoted(text)]
            process.currentDirectoryURL = directory
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0, "sh failed for \(text.debugDescription)")
            XCTAssertEqual(String(decoding: data, as: UTF8.self), text, "sh read back something else for \(text.debugDescription)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.appendingPathComponent("pwned").path), "quoted text ran a command")
    }

    /// `process` and `json` output is JSON whatever a credential holds: every control
    /// character, quotes, backslashes and text beyond ASCII read back exactly.
    func testJSONStringsRoundTripWhateverTheText() throws {
        let controls = String(String.UnicodeScalarView((0..<0x20).compactMap(Unicode.Scalar.init) + ["\u{7F}"]))
        for text in [controls, "\"", "\\", "\\\"", "a\",\"AccessKeyId\":\"EVIL", "é\u{2028}\u{2029}😀", ""] {
            let literal = Rendering.jsonString(text)
            let read = try JSONSerialization.jsonObject(with: Data("[\(literal)]".utf8)) as? [String]
            XCTAssertEqual(read, [text], "read back something else for \(text.debugDescription): \(literal)")
            XCTAssertFalse(literal.unicodeScalars.contains { $0.value < 0x20 }, "a raw control character in \(literal.debugDescription)")
        }
    }

    /// Error lines quote text from outside (a keystore's planted name, a service's message):
    /// none of it may end the line, move or recolour the terminal (C0 and C1 controls), or
    /// reorder what the reader sees (bidirectional formatting).
    func testErrorLinesCarryNoControlOrBidirectionalCharacters() {
        XCTAssertEqual(Terminal.oneLine("a\u{1B}[31mb\nc\u{85}d\u{9B}e\u{202E}f\u{2066}g\u{7F}h\u{061C}i"), "a [31mb c d e f g h i")
        XCTAssertEqual(Terminal.oneLine("plain – ünïcode ✓"), "plain – ünïcode ✓")
    }
}
