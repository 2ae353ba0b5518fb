@testable import FederateCLI
import Foundation
import XCTest

/// libpq's password file format, as `federate` reads it for a `postgres://` URL without a
/// password.
final class PostgresPassFileTests: XCTestCase {
    func testTheFirstMatchingLineWinsAndStarsMatchAnything() {
        let file = PostgresPassFile(text: """
            # comment: db.internal:5432:identity:broker:not-this-one
            other.host:5432:identity:broker:wrong-host
            db.internal:6432:identity:broker:wrong-port
            db.internal:5432:identity:broker:first
            db.internal:5432:identity:broker:second
            *:*:*:reader:any-host
            """)
        XCTAssertEqual(file.password(host: "db.internal", port: 5432, database: "identity", user: "broker"), "first")
        XCTAssertEqual(file.password(host: "elsewhere", port: 1, database: "x", user: "reader"), "any-host")
        XCTAssertNil(file.password(host: "db.internal", port: 5432, database: "other", user: "broker"))
    }

    func testEscapedColonsAndBackslashesAndAPasswordHoldingColons() {
        let file = PostgresPassFile(text: #"fe80\:\:1:5432:my\\db:broker:pa:ss\:word\\"# + "\r\n" + "short:line\n")
        XCTAssertEqual(file.entries.count, 1, "a line with fewer than five fields is skipped")
        XCTAssertEqual(file.password(host: "fe80::1", port: 5432, database: #"my\db"#, user: "broker"), #"pa:ss:word\"#)
    }

    func testAFileOthersCanReadIsIgnoredAndAMissingOneIsNothing() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pgpass-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/.pgpass"
        let noFile = PostgresPassFile.load(home: directory) { _ in nil }
        guard case .none = noFile else { return XCTFail("\(noFile)") }

        try Data("*:*:*:*:secret\n".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(chmod(path, 0o640), 0)
        let shared = PostgresPassFile.load(home: directory) { _ in nil }
        guard case .ignored(let reason) = shared else { return XCTFail("a group-readable file was used: \(shared)") }
        XCTAssertTrue(reason.contains("group or world access"), reason)
        XCTAssertFalse(reason.contains("secret"), reason)

        XCTAssertEqual(chmod(path, 0o600), 0)
        guard case .file(let file) = PostgresPassFile.load(home: directory, environment: { _ in nil }) else { return XCTFail("the 0600 file was not read") }
        XCTAssertEqual(file.password(host: "h", port: 1, database: "d", user: "u"), "secret")

        // $PGPASSFILE names another; a FIFO there is refused without waiting for a writer.
        let fifo = directory + "/fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let named = PostgresPassFile.load(home: directory) { $0 == "PGPASSFILE" ? fifo : nil }
        guard case .ignored(let fifoReason) = named else { return XCTFail("a FIFO was read: \(named)") }
        XCTAssertTrue(fifoReason.contains("not a plain file"), fifoReason)
    }
}
