import BrokerTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// One finished run of `federate`.
struct FederateRun: CustomStringConvertible {
    var arguments: [String]
    var status: Int32
    var stdout: String
    var stderr: String

    /// For assertion messages: arguments, exit code and stderr (stdout may hold credentials).
    var description: String {
        "federate \(arguments.joined(separator: " ")) → exit \(status), stderr: \(stderr.debugDescription)"
    }
}

/// Runs the built `federate` as a subprocess in an isolated environment: a private
/// temporary directory as `HOME`, a keystore under it, no AWS or XDG variables.
///
/// Every run is checked for leaks: the strings in ``neverPrinted`` must not appear in
/// stdout or stderr; those in ``notOnStderr`` must not appear in stderr, nor in stdout
/// except for commands whose output is the credentials (`login`, `guest`, `credentials`).
final class FederateHarness {
    let binary: String
    /// A fresh 0700 directory, removed by ``cleanUp()``.
    let directory: String
    /// The keystore directory (`IDENTITY_BROKER_KEYSTORE`), not created up front.
    let keystore: String
    /// The child's environment.
    var environment: [String: String]
    /// Never in any output: provider tokens, keystore keys.
    var neverPrinted: [String] = []
    /// Never on stderr, and on stdout only where credentials are the output.
    var notOnStderr: [String] = []
    /// Every run so far.
    private(set) var runs: [FederateRun] = []

    init() throws {
        binary = try FederateBinary.locate()
        let template = FileManager.default.temporaryDirectory.appendingPathComponent("federate-cli-XXXXXX").path
        var bytes = Array(template.utf8CString)
        guard mkdtemp(&bytes) != nil else { throw HarnessError("mkdtemp failed: errno \(errno)") }
        directory = String(decoding: bytes.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        keystore = directory + "/keystore"
        var environment: [String: String] = [
            "HOME": directory,
            "IDENTITY_BROKER_KEYSTORE": keystore,
            "LANG": "C.UTF-8",
        ]
        // Tests target loopback only. A run that expects a refusal before any request (a bad
        // region, a keystore that fails to open) names no loopback endpoint: should a
        // regression send the request anyway, it dies at a dead loopback proxy instead of
        // reaching AWS (libcurl, botocore and the AWS CLI all read these), and no host name
        // is looked up. Loopback endpoints go direct, as they would without a proxy.
        for name in ["http_proxy", "https_proxy", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"] {
            environment[name] = Self.deadProxy
        }
        for name in ["no_proxy", "NO_PROXY"] { environment[name] = "127.0.0.1,localhost,::1,[::1]" }
        let inherited = ProcessInfo.processInfo.environment
        for name in ["PATH", "LD_LIBRARY_PATH", "TMPDIR", "TSAN_OPTIONS", "ASAN_OPTIONS", "SWIFT_BACKTRACE"] {
            if let value = inherited[name] { environment[name] = value }
        }
        self.environment = environment
    }

    /// The discard port on loopback: nothing listens there, so a connection is refused at once.
    static let deadProxy = "http://127.0.0.1:9/"

    func cleanUp() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Writes `text` to a new file in ``directory`` and returns its path.
    func write(_ text: String, to name: String) throws -> String {
        let path = directory + "/" + name
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Runs `federate arguments…`, killing it (SIGKILL) after `timeout` seconds.
    ///
    /// SIGKILL, never SIGTERM: a child spawned from a Swift concurrency thread inherits
    /// that thread's blocked-signal mask, SIGTERM included.
    @discardableResult
    func run(
        _ arguments: [String],
        stdin: String? = nil,
        environment overrides: [String: String?] = [:],
        stdoutDevice: String? = nil,
        timeout: TimeInterval = 60,
        launcher: [String] = [],
        file: StaticString = #filePath,
        line: UInt = #line
    ) throws -> FederateRun {
        let tag = UUID().uuidString
        let outPath = directory + "/.out-\(tag)"
        let errPath = directory + "/.err-\(tag)"
        defer {
            try? FileManager.default.removeItem(atPath: outPath)
            try? FileManager.default.removeItem(atPath: errPath)
        }
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)

        let process = Process()
        // A launcher (`env`'s arguments) runs first and execs federate: `launcher + [binary] + arguments`.
        process.executableURL = URL(fileURLWithPath: launcher.isEmpty ? binary : "/usr/bin/env")
        process.arguments = launcher.isEmpty ? arguments : launcher + [binary] + arguments
        var environment = self.environment
        for (name, value) in overrides { environment[name] = value }
        process.environment = environment
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let outHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: outPath))
        let errHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: errPath))
        defer {
            try? outHandle.close()
            try? errHandle.close()
        }
        process.standardOutput = outHandle
        if let stdoutDevice {
            process.standardOutput = FileHandle(forWritingAtPath: stdoutDevice)
        }
        process.standardError = errHandle
        var inPath: String?
        if let stdin {
            let path = directory + "/.in-\(tag)"
            try Data(stdin.utf8).write(to: URL(fileURLWithPath: path))
            inPath = path
            process.standardInput = FileHandle(forReadingAtPath: path)
        } else {
            process.standardInput = FileHandle.nullDevice
        }
        defer { if let inPath { try? FileManager.default.removeItem(atPath: inPath) } }

        try process.run()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline {
            usleep(5_000)
        }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            XCTFail("federate \(arguments.joined(separator: " ")) did not finish within \(timeout) s", file: file, line: line)
        }
        process.waitUntilExit()
        let result = FederateRun(
            arguments: arguments,
            status: process.terminationReason == .exit ? process.terminationStatus : 128 + process.terminationStatus,
            stdout: (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
        )
        runs.append(result)
        checkLeaks(result, file: file, line: line)
        return result
    }

    /// Runs and asserts the exit code; for a failure, also that stderr is exactly one
    /// `federate: …` line and stdout is empty.
    @discardableResult
    func expect(
        _ status: Int32,
        _ arguments: [String],
        stdin: String? = nil,
        environment: [String: String?] = [:],
        file: StaticString = #filePath,
        line: UInt = #line
    ) throws -> FederateRun {
        let result = try run(arguments, stdin: stdin, environment: environment, file: file, line: line)
        XCTAssertEqual(result.status, status, "\(result)", file: file, line: line)
        if status != 0 {
            assertOneErrorLine(result, file: file, line: line)
            XCTAssertEqual(result.stdout, "", "a failing run printed to stdout: \(result)", file: file, line: line)
        }
        return result
    }

    func assertOneErrorLine(_ result: FederateRun, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(result.stderr.hasPrefix("federate: "), "stderr: \(result.stderr.debugDescription)", file: file, line: line)
        XCTAssertTrue(result.stderr.hasSuffix("\n"), "stderr: \(result.stderr.debugDescription)", file: file, line: line)
        XCTAssertEqual(result.stderr.filter { $0 == "\n" }.count, 1, "stderr is not one line: \(result.stderr.debugDescription)", file: file, line: line)
        // docs/cli.md: `federate: <what happened>; <what to do>`.
        XCTAssertTrue(result.stderr.contains("; "), "the line does not say what to do: \(result.stderr.debugDescription)", file: file, line: line)
    }

    private func checkLeaks(_ result: FederateRun, file: StaticString, line: UInt) {
        let command = result.arguments.first ?? ""
        let printsCredentials = ["login", "guest", "credentials"].contains(command)
        // Not even 16 characters of a secret, in any letter case.
        let never = neverPrinted.filter { !$0.isEmpty }
        XCTAssertNil(leakedRun(in: result.stdout, of: never), "a secret leaked to stdout of \(command)", file: file, line: line)
        XCTAssertNil(leakedRun(in: result.stderr, of: never), "a secret leaked to stderr of \(command)", file: file, line: line)
        let credentials = notOnStderr.filter { !$0.isEmpty }
        XCTAssertNil(leakedRun(in: result.stderr, of: credentials), "a credential leaked to stderr of \(command)", file: file, line: line)
        if !printsCredentials {
            XCTAssertNil(leakedRun(in: result.stdout, of: credentials), "a credential leaked to stdout of \(command)", file: file, line: line)
        }
    }

    // MARK: The keystore's SQLite layout

    /// The service every `federate` item lives under.
    static let service = "identity-broker"

    /// Unpadded base64url of `text`'s UTF-8, as the keystore names services and groups on disk.
    static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// `<root>/users/<uid>`: the user's private namespace directory (0700).
    var userDirectory: String { "\(keystore)/users/\(geteuid())" }

    /// `<root>/groups/<b64 group>.group`: a shared group's directory (2770).
    func groupDirectory(_ group: String) -> String { "\(keystore)/groups/\(Self.base64URL(group)).group" }

    /// The database of `federate`'s items in `group` (private when `nil`): `<b64 service>.sqlite`.
    func database(group: String? = nil) -> String {
        "\(group.map(groupDirectory) ?? userDirectory)/\(Self.base64URL(Self.service)).sqlite"
    }

    /// The private key file, `<root>/users/<uid>/key` (0600).
    var privateKeyFile: String { userDirectory + "/key" }

    /// Every regular file under the keystore root, relative to it, sorted.
    func keystoreFiles() -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: keystore) else { return [] }
        var files: [String] = []
        for case let relative as String in enumerator {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: keystore + "/" + relative, isDirectory: &isDirectory), !isDirectory.boolValue {
                files.append(relative)
            }
        }
        return files.sorted()
    }
}

struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Checks on `federate`'s outputs.
enum Output {
    /// Parses `text` as one JSON object followed by a newline and nothing else.
    static func jsonObject(_ text: String, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        XCTAssertTrue(text.hasSuffix("}\n"), "output is not one JSON object and a newline: \(text.debugDescription.prefix(80))", file: file, line: line)
        XCTAssertEqual(text.filter { $0 == "\n" }.count, 1, "output has more than one line", file: file, line: line)
        let value = try JSONSerialization.jsonObject(with: Data(text.utf8))
        guard let object = value as? [String: Any] else { throw HarnessError("output is not a JSON object") }
        return object
    }

    /// Asserts the AWS credential_process shape: exactly Version 1, AccessKeyId,
    /// SecretAccessKey, SessionToken, and an ISO 8601 UTC Expiration, plus `extraKeys`.
    @discardableResult
    static func assertProcessShape(
        _ text: String, extraKeys: Set<String> = [], file: StaticString = #filePath, line: UInt = #line
    ) throws -> [String: Any] {
        let object = try jsonObject(text, file: file, line: line)
        XCTAssertEqual(Set(object.keys), Set(["Version", "AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"]).union(extraKeys), file: file, line: line)
        XCTAssertEqual(object["Version"] as? Int, 1, file: file, line: line)
        for key in ["AccessKeyId", "SecretAccessKey", "SessionToken"] {
            XCTAssertFalse((object[key] as? String ?? "").isEmpty, "\(key) is missing", file: file, line: line)
        }
        let expiration = object["Expiration"] as? String ?? ""
        XCTAssertNotNil(parseISO8601(expiration), "Expiration \(expiration.debugDescription) is not ISO 8601 UTC", file: file, line: line)
        return object
    }

    /// `YYYY-MM-DDTHH:MM:SSZ` → a date; `nil` for anything else.
    static func parseISO8601(_ text: String) -> Date? {
        let pattern = #"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"#
        guard text.range(of: pattern, options: .regularExpression) != nil else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

/// What ``seccompLauncher(failing:)`` makes fail.
enum FailedSystemCall: String {
    /// `close_range`, with ENOSYS, as on kernels before 5.9 (Ubuntu 20.04's 5.4, RHEL 8's 4.18).
    case closeRange = "close_range"
    /// A new process (`clone` without `CLONE_THREAD`: `fork`, not a thread), with EAGAIN, as
    /// when a process limit or overcommit refuses it.
    case fork
    /// `getdents64`, with EIO: no directory can be listed, `/proc/self/fd` included, as where
    /// `/proc` cannot be read (with `closeRange`, what leaves the spawn its last fallback).
    case directoryListing = "getdents64"
}

/// A launcher that runs the rest of its arguments with `failing` system calls failing: a
/// seccomp filter, which the process and everything it starts keep. It checks that each
/// fails before it runs anything, and exits 125 when the filter did not take.
func seccompLauncher(failing: Set<FailedSystemCall>) -> [String] {
    ["python3", "-c", """
        import ctypes, errno, os, platform, struct, sys
        failing = set(\(failing.map(\.rawValue).sorted()))
        libc = ctypes.CDLL(None, use_errno=True)
        CLOSE_RANGE = 436  # the same number on every architecture
        CLONE = {"x86_64": 56, "aarch64": 220}[platform.machine()]
        CLONE_THREAD = 0x00010000
        GETDENTS64 = {"x86_64": 217, "aarch64": 61}[platform.machine()]
        def statement(code, jt, jf, k):
            return struct.pack("HBBI", code, jt, jf, k)
        LOAD_NR, LOAD_ARG0_LOW = statement(0x20, 0, 0, 0), statement(0x20, 0, 0, 16)
        def fail(code):
            return statement(0x06, 0, 0, 0x00050000 | code)
        blocks = []
        if "close_range" in failing:
            blocks.append(LOAD_NR + statement(0x15, 0, 1, CLOSE_RANGE) + fail(errno.ENOSYS))
        if "fork" in failing:
            # clone with CLONE_THREAD set is a thread: allowed (jump over the failure).
            blocks.append(LOAD_NR + statement(0x15, 0, 3, CLONE) + LOAD_ARG0_LOW
                          + statement(0x45, 1, 0, CLONE_THREAD) + fail(errno.EAGAIN))
        if "getdents64" in failing:
            blocks.append(LOAD_NR + statement(0x15, 0, 1, GETDENTS64) + fail(errno.EIO))
        program = b"".join(blocks) + statement(0x06, 0, 0, 0x7FFF0000)
        buffer = ctypes.create_string_buffer(program)
        class Program(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
        fprog = Program(len(program) // 8, ctypes.addressof(buffer))
        PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            sys.exit(125)
        libc.syscall.restype = ctypes.c_long
        if "close_range" in failing:
            if libc.syscall(CLOSE_RANGE, ctypes.c_uint(1 << 30), ctypes.c_uint(1 << 30), ctypes.c_uint(0)) != -1 or ctypes.get_errno() != errno.ENOSYS:
                sys.exit(125)
        if "fork" in failing:
            try:
                if os.fork() == 0:
                    os._exit(0)
                sys.exit(125)
            except BlockingIOError:
                pass
        if "getdents64" in failing:
            try:
                os.listdir("/")
                sys.exit(125)
            except OSError as error:
                if error.errno != errno.EIO:
                    sys.exit(125)
        os.execvp(sys.argv[1], sys.argv[1:])
        """]
}

/// A launcher for ``FederateHarness/run(_:stdin:environment:stdoutDevice:timeout:launcher:file:line:)``
/// that starts federate with exactly one descriptor above standard error: 7, open on
/// /dev/null, as a `7</dev/null` redirection would. Whatever else the command of
/// `federate exec` has open leaked from federate; 7 must reach it.
let onlyDescriptor7Launcher = ["python3", "-c", """
    import os, sys
    fd = os.open("/dev/null", os.O_RDONLY)
    os.dup2(fd, 7)
    os.closerange(3, 7)
    os.closerange(8, 65536)
    os.execv(sys.argv[1], sys.argv[1:])
    """]

/// Python defining `open_descriptors()`: the descriptors from 3 up that the calling process
/// has open, each with what it points at (`/proc/self/fd`), for a command of `federate exec`
/// to report what it inherited.
let pythonOpenDescriptors = """
    import os
    def open_descriptors():
        found = {}
        for fd in range(3, 4096):
            try:
                os.fstat(fd)
            except OSError:
                continue
            found[str(fd)] = os.readlink("/proc/self/fd/%d" % fd)
        return found

    """
