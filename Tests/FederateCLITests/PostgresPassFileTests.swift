@testable import FederateCLI
import Foundation
import XCTest

/// libpq's password file format, as `federate` reads it for a `postgres://` URL without a
/// password: the cases libpq's `passwordFromFile` decides, byte for byte.
final class PostgresPassFileTests: XCTestCase {
    private func password(_ text: String, host: String = "db.internal", port: Int = 5432, database: String = "identity", user: String = "broker") -> String? {
        PostgresPassFile.password(in: ArraySlice(Array(text.utf8)), host: host, port: String(port), database: database, user: user)
            .map { String(decoding: $0, as: UTF8.self) }
    }

    func testTheFirstMatchingLineWinsAndAStarMatchesAnything() {
        let text = """
            #db.internal:5432:identity:broker:a-comment
            other.host:5432:identity:broker:wrong-host
            db.internal:6432:identity:broker:wrong-port
            db.internal:5432:identity:broker:first
            db.internal:5432:identity:broker:second
            *:*:*:reader:any-host
            """
        XCTAssertEqual(password(text), "first")
        XCTAssertEqual(password(text, host: "elsewhere", port: 1, database: "x", user: "reader"), "any-host")
        XCTAssertNil(password(text, database: "other"))
        XCTAssertNil(password("db.internal:5432:identity:broker"), "a line without a password field matches nothing")
    }

    func testEscapesAsLibpqReadsThem() {
        // The password ends at the next unescaped colon; \: and \\ are literal.
        XCTAssertEqual(password(#"db.internal:5432:identity:broker:pa\:ss\\word:ignored"#), #"pa:ss\word"#)
        XCTAssertEqual(password(#"fe80\:\:1:5432:my\\db:broker:pw"#, host: "fe80::1", database: #"my\db"#), "pw")
        // An escaped star is a literal star, not a wildcard.
        XCTAssertNil(password(#"\*:5432:identity:broker:pw"#))
        XCTAssertEqual(password(#"\*:5432:identity:broker:pw"#, host: "*"), "pw")
        // Trailing carriage returns go; a backslash at the very end stays.
        XCTAssertEqual(password("db.internal:5432:identity:broker:pw\r\r\n"), "pw")
        XCTAssertEqual(password("db.internal:5432:identity:broker:pw\r"), "pw")
        XCTAssertEqual(password(#"db.internal:5432:identity:broker:abc\"#), #"abc\"#)
        // Bytes, not characters: a combining mark after the colon does not hide it.
        XCTAssertEqual(password("db.internal:5432:identity:broker:\u{301}pw"), "\u{301}pw")
        XCTAssertNil(password("db.internal:5432:identity:brok\u{65}\u{301}r:pw", user: "brok\u{e9}r"), "canonically equal, different bytes")
    }

    func testAFileOthersCanReadIsIgnoredAndAMissingOneIsNothing() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pgpass-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func lookup(_ environment: @escaping (String) -> String? = { _ in nil }) -> PostgresPassFile.Lookup {
            PostgresPassFile.lookup(home: directory, environment: environment, host: "h", port: 1, database: "d", user: "u")
        }
        guard case .none = lookup() else { return XCTFail("no file is no password") }

        let path = directory + "/.pgpass"
        try Data("*:*:*:*:secret\n".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(chmod(path, 0o640), 0)
        guard case .ignored(let reason) = lookup() else { return XCTFail("a group-readable file was used") }
        XCTAssertTrue(reason.contains("group or world access"), reason)
        XCTAssertFalse(reason.contains("secret"), reason)

        XCTAssertEqual(chmod(path, 0o600), 0)
        guard case .password(let password) = lookup() else { return XCTFail("the 0600 file was not read") }
        XCTAssertEqual(password, "secret")

        // $PGPASSFILE names another; a FIFO there is refused without waiting for a writer.
        let fifo = directory + "/fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        guard case .ignored(let fifoReason) = lookup({ $0 == "PGPASSFILE" ? fifo : nil }) else { return XCTFail("a FIFO was read") }
        XCTAssertTrue(fifoReason.contains("not a plain file"), fifoReason)
    }
}
