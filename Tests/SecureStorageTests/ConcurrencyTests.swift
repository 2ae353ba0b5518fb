import Foundation
import XCTest
@testable import SecureStorage

final class ConcurrencyTests: XCTestCase {
    func testFourProcessesWritingAtOnceLoseNothing() throws {
        let temporary = try TemporaryRoot()
        let executable = try stressExecutable()
        let workers = 4
        let count = 40
        let processes = try (0..<workers).map { worker -> Process in
            let process = Process()
            process.executableURL = executable
            process.arguments = ["write", temporary.root, "tool", "\(worker)", "\(count)"]
            try process.run()
            return process
        }
        for process in processes {
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0)
        }
        let keystore = try FileKeystore(root: temporary.root, service: "tool")
        let keys = try keystore.keys()
        XCTAssertEqual(keys.count, workers * count + 1)
        for worker in 0..<workers {
            for index in 0..<count {
                XCTAssertEqual(string(try keystore.data(forKey: "w\(worker)-\(index)")), "value-\(worker)-\(index)")
            }
        }
        let shared = try XCTUnwrap(string(try keystore.data(forKey: "shared")))
        XCTAssertTrue(shared.hasPrefix("worker-"), shared)
    }

    func testThreadsWritingAtOnceLoseNothing() throws {
        let temporary = try TemporaryRoot()
        let keystore = try FileKeystore(root: temporary.root, service: "tool")
        let failures = Atomic()
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for index in 0..<20 {
                do {
                    try keystore.set(bytes("\(thread)-\(index)"), forKey: "t\(thread)-\(index)")
                    _ = try keystore.requireData(forKey: "t\(thread)-\(index)")
                } catch {
                    failures.increment()
                }
            }
        }
        XCTAssertEqual(failures.value, 0)
        XCTAssertEqual(try keystore.keys().count, 160)
    }

    func testKillNineDuringWritesLeavesOldOrNewValues() throws {
        let temporary = try TemporaryRoot()
        let executable = try stressExecutable()
        let keys = 5
        var generator = SystemRandomNumberGenerator()
        for round in 0..<6 {
            let process = Process()
            process.executableURL = executable
            process.arguments = ["overwrite", temporary.root, "tool", "\(keys)"]
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            _ = output.fileHandleForReading.readData(ofLength: 6) // "ready\n"
            usleep(UInt32.random(in: 1_000...60_000, using: &generator))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            XCTAssertEqual(process.terminationReason, .uncaughtSignal, "round \(round)")

            let keystore = try FileKeystore(root: temporary.root, service: "tool")
            let found = try keystore.keys()
            XCTAssertLessThanOrEqual(found.count, keys)
            for key in found {
                let value = try XCTUnwrap(string(try keystore.data(forKey: key)), "round \(round) key \(key)")
                XCTAssertTrue(value.hasPrefix("gen-") && value.hasSuffix(String(repeating: "x", count: 300)), "round \(round): \(value.prefix(20))")
            }
            // Leftover temporary files are swept on open and never listed.
            let names = try FileManager.default.contentsOfDirectory(atPath: keystore.namespace.directory)
            XCTAssertFalse(names.contains { $0.hasPrefix(".tmp.") }, "\(names)")
        }
    }

    func testLockTimeout() throws {
        let temporary = try TemporaryRoot()
        let keystore = try FileKeystore(root: temporary.root, service: "tool", lockTimeout: .milliseconds(50))
        // Hold the namespace lock from another open file description.
        let fd = open(keystore.namespace.lock.path, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        XCTAssertEqual(flock(fd, LOCK_EX), 0)
        let error = assertKeystoreError(.lockTimeout) { try keystore.set([1], forKey: "k") }
        XCTAssertEqual(error?.path, keystore.namespace.lock.path)
        XCTAssertEqual(flock(fd, LOCK_UN), 0)
        try keystore.set([1], forKey: "k")
    }
}

final class Atomic: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.lock(); count += 1; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return count }
}
