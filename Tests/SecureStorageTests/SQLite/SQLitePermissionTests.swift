import Foundation
import XCTest
@testable import SecureStorage

final class SQLitePermissionTests: XCTestCase {
    func testPrivateModes() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        try await keystore.set([1], forKey: "k")
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertEqual(mode(of: temporary.root), 0o700)
        XCTAssertEqual(mode(of: layout.usersDirectory), 0o700)
        XCTAssertEqual(mode(of: layout.userDirectory), 0o700)
        XCTAssertEqual(mode(of: layout.keyFilePath(.none)), 0o600)
        XCTAssertEqual(mode(of: layout.databasePath(.none)), 0o600)
        XCTAssertEqual(mode(of: layout.databasePath(.none) + "-wal"), 0o600)
        XCTAssertEqual(mode(of: layout.databasePath(.none) + "-shm"), 0o600)
    }

    func testSharedGroupModesUnderUmask077() async throws {
        let temporary = try TemporaryRoot()
        let previous = umask(0o077)
        defer { umask(previous) }
        let team = AccessGroup(name: "team")
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: team)
        defer { keystore.close() }
        try await keystore.set([1], forKey: "k")
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertEqual(mode(of: layout.namespaceDirectory(team)), 0o2770)
        XCTAssertEqual(mode(of: layout.keyFilePath(team)), 0o640)
        XCTAssertEqual(mode(of: layout.databasePath(team)), 0o660)
        XCTAssertEqual(mode(of: layout.databasePath(team) + "-wal"), 0o660)
        XCTAssertEqual(mode(of: layout.databasePath(team) + "-shm"), 0o660)
    }

    func testGroupSharedRootGetsStickyContainers() async throws {
        let temporary = try TemporaryRoot()
        XCTAssertEqual(mkdir(temporary.root, 0o700), 0)
        XCTAssertEqual(chmod(temporary.root, 0o3770), 0)
        let team = AccessGroup(name: "team")
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: team)
        keystore.close()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertEqual(mode(of: layout.groupsDirectory), 0o3770)
        XCTAssertEqual(mode(of: layout.usersDirectory) & 0o1770, 0o1770)
        XCTAssertEqual(mode(of: layout.userDirectory), 0o700)
    }

    func testGroupWritableRootWithoutStickyIsRefused() throws {
        let temporary = try TemporaryRoot()
        XCTAssertEqual(mkdir(temporary.root, 0o700), 0)
        XCTAssertEqual(chmod(temporary.root, 0o2770), 0)
        guard case .failure(let error) = openResult(root: temporary.root) else { return XCTFail("opened") }
        XCTAssertEqual(error.code, .insecurePermissions)
        XCTAssertTrue(error.reason.contains("chmod +t"), error.reason)
        XCTAssertEqual(error.path, temporary.root)
    }

    func testLoosePrivateDatabaseIsRefused() throws {
        let temporary = try TemporaryRoot()
        try SQLiteKeystore(root: temporary.root, service: "tool").close()
        let path = try StoreLayout(root: temporary.root, service: "tool").databasePath(.none)
        XCTAssertEqual(chmod(path, 0o640), 0)
        guard case .failure(let error) = openResult(root: temporary.root) else { return XCTFail("opened") }
        XCTAssertEqual(error.code, .insecurePermissions)
        XCTAssertEqual(error.path, path)
    }

    /// Plants `kind` at `path` (after an initial open created the store, unless `fresh`), and
    /// checks that opening is refused naming the path, without hanging.
    private func assertPlantRefused(suffix: String, group: AccessGroup = .none, fresh: Bool, plant: (String) -> Int32, file: StaticString = #filePath, line: UInt = #line) throws {
        let temporary = try TemporaryRoot()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        if fresh {
            XCTAssertTrue(try layout.prepareDirectories(group, create: true), file: file, line: line)
        } else {
            try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: group).close()
        }
        let path = suffix == "key" ? layout.keyFilePath(group) : layout.databasePath(group) + suffix
        _ = unlink(path)
        XCTAssertEqual(plant(path), 0, "planting at \(path)", file: file, line: line)
        let root = temporary.root
        let result = withinTimeout(10, file: file, line: line) { openResult(root: root, group: group).map { $0.close() } }
        guard case .failure(let error)? = result else { return XCTFail("opened with a plant at \(path)", file: file, line: line) }
        XCTAssertEqual(error.code, .insecurePermissions, "\(error)", file: file, line: line)
        XCTAssertEqual(error.path, path, file: file, line: line)
    }

    func testPlantedFilesAreRefusedWithoutHanging() throws {
        let victim = FileManager.default.temporaryDirectory.appendingPathComponent("victim-\(UUID().uuidString)").path
        XCTAssertTrue(FileManager.default.createFile(atPath: victim, contents: Data()))
        defer { try? FileManager.default.removeItem(atPath: victim) }
        let plants: [(String, (String) -> Int32)] = [
            ("symlink", { symlink(victim, $0) }),
            ("fifo", { mkfifo($0, 0o600) }),
            ("directory", { mkdir($0, 0o700) }),
        ]
        for (name, plant) in plants {
            for suffix in ["", "-wal", "-shm", "-journal", "key"] {
                for fresh in [true, false] {
                    do { try assertPlantRefused(suffix: suffix, fresh: fresh, plant: plant) } catch { XCTFail("\(name) at '\(suffix)', fresh \(fresh): \(error)") }
                }
            }
            do { try assertPlantRefused(suffix: "", group: AccessGroup(name: "team"), fresh: false, plant: plant) } catch { XCTFail("\(name) at a shared database: \(error)") }
        }
    }
}
