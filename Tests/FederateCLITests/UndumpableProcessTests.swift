import BrokerTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Every `federate` process holds a secret at some point (the token `login` reads, the
/// keystore key, the credentials `credentials` prints), so none may be dumped or read by
/// another process of the same user. The kernel shows it: a non-dumpable process's
/// `/proc/<pid>/environ` (and `mem`) belongs to root, so that user can no longer open them.
final class UndumpableProcessTests: XCTestCase {
    private static let setpriv = "/usr/bin/setpriv"
    private static let nobody: uid_t = 65_534

    func testFederateAndFederateServerCannotBeReadByOtherProcessesOfTheUser() throws {
        #if os(Linux)
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: Self.setpriv) else {
            throw missingPrerequisite("needs root and setpriv, to run federate as a user whose processes root can tell apart")
        }
        let federate = try FederateBinary.locate()
        let server = URL(fileURLWithPath: federate).deletingLastPathComponent().appendingPathComponent("federate-server").path
        for binary in [federate, server] {
            try assertUndumpableWhileWaitingForAToken(binary)
        }
        #else
        throw XCTSkip("PR_SET_DUMPABLE is Linux's")
        #endif
    }

    /// Runs `login --token-stdin` as `nobody` with standard input held open, so that it waits
    /// for the token, and looks at who owns its `/proc/<pid>/environ`.
    private func assertUndumpableWhileWaitingForAToken(_ binary: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.setpriv)
        process.arguments = [
            "--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups", binary,
            "login", "--pool-id", "us-east-1:00000000-0000-0000-0000-000000000000", "--provider", "google", "--token-stdin",
        ]
        process.environment = ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent"]
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer {
            try? input.fileHandleForWriting.close()
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        let name = URL(fileURLWithPath: binary).lastPathComponent
        let environ = "/proc/\(process.processIdentifier)/environ"
        // setpriv runs first, as nobody and dumpable; the process counts once it is the binary.
        let deadline = Date().addingTimeInterval(10)
        var owner: uid_t?
        while Date() < deadline, process.isRunning {
            let running = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.processIdentifier)/exe")) ?? ""
            var info = stat()
            if URL(fileURLWithPath: running).lastPathComponent == name, stat(environ, &info) == 0 {
                owner = info.st_uid
                if owner == 0 { break }
            }
            usleep(20_000)
        }
        XCTAssertTrue(process.isRunning, "\(name) did not wait for its token", file: file, line: line)
        XCTAssertEqual(owner, 0, "\(name)'s /proc/<pid>/environ belongs to its user: another process of the user can read it, and it can be dumped", file: file, line: line)
    }
}
