import BrokerTestSupport
import Foundation
import XCTest

/// Finds the `federate` executable that `swift build`/`swift test` built next to the
/// test bundle, whatever the scratch path (`.build`, `--scratch-path .build-cli`, …).
enum FederateBinary {
    /// The path, or a failure naming the places searched. `FEDERATE_BINARY` overrides.
    static func locate(file: StaticString = #filePath) throws -> String {
        let fileManager = FileManager.default
        if let override = ProcessInfo.processInfo.environment["FEDERATE_BINARY"], !override.isEmpty {
            return override
        }
        var directories: [URL] = []
        // On Linux the .xctest bundle is the running executable; on macOS it is a bundle
        // loaded by xctest. Either way `federate` sits in the directory holding it.
        if let executable = try? fileManager.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            directories.append(URL(fileURLWithPath: executable).deletingLastPathComponent())
        }
        for bundle in Bundle.allBundles where bundle.bundleURL.pathExtension == "xctest" {
            directories.append(bundle.bundleURL.deletingLastPathComponent())
        }
        directories.append(Bundle.main.bundleURL)
        directories.append(Bundle.main.bundleURL.deletingLastPathComponent())
        if let first = CommandLine.arguments.first {
            directories.append(URL(fileURLWithPath: first).deletingLastPathComponent())
        }
        for directory in directories {
            let candidate = directory.appendingPathComponent("federate").path
            if fileManager.isExecutableFile(atPath: candidate) {
                return candidate
            }
        }
        // Last resort: the default scratch path of the package this file belongs to.
        let packageRoot = URL(fileURLWithPath: "\(file)")
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let fallback = packageRoot.appendingPathComponent(".build/debug/federate").path
        if fileManager.isExecutableFile(atPath: fallback) { return fallback }
        throw missingPrerequisite(
            "the federate executable was not found next to the test bundle (searched \(directories.map(\.path))); build it or set FEDERATE_BINARY")
    }
}
