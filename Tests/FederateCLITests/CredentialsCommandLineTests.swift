import ArgumentParser
import BrokerTestSupport
@testable import FederateCLI
import XCTest

/// `federate credentials` has two readers: CredentialsCommandLine for the command lines an SDK
/// runs, argument-parser for everything else. Whatever the first accepts, argument-parser must
/// accept with the same values; whatever it refuses goes to argument-parser, so the errors and
/// exit statuses are argument-parser's by construction.
final class CredentialsCommandLineTests: XCTestCase {
    /// The options as the tests write them, with the field each one sets.
    private static let valueOptions = ["--session", "--keystore", "--access-group", "--region", "--endpoint", "--expiry-margin", "--format"]
    private static let flags = ["--allow-insecure-endpoint", "--verbose"]
    private static let values = [
        "alice", "bench", "", "-x", "--verbose", "5", "0", "-5", "+7", "soon", "99999999999999999999", "json", "env",
        "process", "yaml", "a=b", "/tmp/keystore", "postgres://u@h:5432/db", "bad name!", "none", "us-east-1",
        "http://127.0.0.1:9/", "credentials", "help", "--", "=",
    ]
    private static let strays = ["--", "-h", "--help", "help", "--version", "-v", "extra", "--unknown", "--session-name", "--verbose=true", "--format=", "-", "--generate-completion-script", "--experimental-dump-help"]

    func testEveryCommandLineItAcceptsArgumentParserReadsTheSame() throws {
        var random = SplitMix64(seed: 13)
        var accepted = 0
        var lines = [["credentials"]]
        for name in Self.valueOptions {
            for value in Self.values {
                lines.append(["credentials", name, value])
                lines.append(["credentials", "\(name)=\(value)"])
            }
        }
        for flag in Self.flags { lines.append(["credentials", flag]) }
        for stray in Self.strays { lines.append(["credentials", stray]) }
        for _ in 0..<800 {
            var line = ["credentials"]
            for _ in 0..<random.below(6) {
                switch random.below(10) {
                case 0..<5:
                    let name = Self.valueOptions[random.below(Self.valueOptions.count)]
                    let value = Self.values[random.below(Self.values.count)]
                    if random.below(2) == 0 { line += [name, value] } else { line.append("\(name)=\(value)") }
                case 5..<8: line.append(Self.flags[random.below(Self.flags.count)])
                case 8: line.append(Self.strays[random.below(Self.strays.count)])
                default: line.append(Self.valueOptions[random.below(Self.valueOptions.count)])  // value missing
                }
            }
            lines.append(line)
        }
        // Not `credentials` first: always argument-parser's.
        lines += [[], ["status"], ["--session", "a", "credentials"], ["help", "credentials"], ["credential"]]

        for line in lines {
            guard let fast = CredentialsCommandLine.parse(line) else { continue }
            accepted += 1
            let parsed: any ParsableCommand
            do {
                parsed = try Federate.parseAsRoot(line)
            } catch {
                XCTFail("\(line): accepted here, but argument-parser refuses it: \(Federate.message(for: error))")
                continue
            }
            guard let reference = parsed as? Credentials else {
                XCTFail("\(line): argument-parser reads \(type(of: parsed)), not credentials")
                continue
            }
            XCTAssertEqual(fast, CredentialsRequest(reference.common, reference.output), "\(line)")
        }
        XCTAssertGreaterThan(accepted, 200, "the fast reader should take the ordinary command lines")
        print("CredentialsCommandLineTests: \(accepted) of \(lines.count) command lines read without argument-parser, all read the same by it")
    }

    /// What an SDK's credential_process runs is read here, not by argument-parser.
    func testOrdinaryCommandLinesAreReadWithoutArgumentParser() throws {
        let ordinary = [
            ["credentials"],
            ["credentials", "--session", "alice"],
            ["credentials", "--session=alice", "--format", "json"],
            ["credentials", "--keystore", "/tmp/ks", "--access-group", "ops", "--expiry-margin", "0", "--verbose"],
            ["credentials", "--region", "eu-west-1", "--endpoint", "http://10.0.0.1:4566/", "--allow-insecure-endpoint", "--format=env"],
        ]
        for line in ordinary {
            let fast = try XCTUnwrap(CredentialsCommandLine.parse(line), "\(line)")
            let reference = try XCTUnwrap(try Federate.parseAsRoot(line) as? Credentials)
            XCTAssertEqual(fast, CredentialsRequest(reference.common, reference.output), "\(line)")
        }
    }

    /// Usage errors go to argument-parser, which words them and picks the exit status.
    func testUsageErrorsAreLeftToArgumentParser() {
        let refused = [
            ["credentials", "--no-such-option"], ["credentials", "--format", "yaml"], ["credentials", "--expiry-margin", "soon"],
            ["credentials", "--expiry-margin=-5"], ["credentials", "--session"], ["credentials", "--session", ""],
            ["credentials", "--session", "bad name!"], ["credentials", "--help"], ["credentials", "-h"], ["credentials", "--"],
            ["credentials", "extra"], ["credentials", "--verbose=true"], ["credentials", "--session", "a", "--session", "b"],
            ["credentials", "--verbose", "--verbose"], ["credentials", "--keystore="], ["credentials", "--access-group", ""],
            ["credentials", "--expiry-margin", "99999999999999999999"], ["--version"], ["credentials", "--version"],
        ]
        for line in refused {
            XCTAssertNil(CredentialsCommandLine.parse(line), "\(line)")
        }
    }
}
