import BrokerTestSupport
import Foundation
import XCTest
@testable import SecureStorage

/// A temporary keystore root, removed when the test ends.
final class TemporaryRoot {
    let base: URL
    var root: String { base.appendingPathComponent("keystore").path }
    var path: String { base.path }

    init() throws {
        base = FileManager.default.temporaryDirectory
            .appendingPathComponent("SecureStorageTests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        _ = chmod(base.path, 0o700)
    }

    deinit { try? FileManager.default.removeItem(at: base) }
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

func string(_ value: [UInt8]?) -> String? { value.map { String(decoding: $0, as: UTF8.self) } }

func mode(of path: String) -> UInt32 {
    var info = stat()
    guard lstat(path, &info) == 0 else { return 0 }
    return UInt32(info.st_mode) & 0o7777
}

func hexBytes(_ hex: String) -> [UInt8] {
    var out = [UInt8]()
    var chars = Array(hex.utf8).makeIterator()
    func nibble(_ c: UInt8) -> UInt8 { c >= 97 ? c - 87 : c >= 65 ? c - 55 : c - 48 }
    while let high = chars.next(), let low = chars.next() { out.append(nibble(high) << 4 | nibble(low)) }
    return out
}

/// The `keystore-stress` helper, built next to the test bundle.
func stressExecutable() throws -> URL {
    let bundleDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    var candidates = [bundleDirectory.appendingPathComponent("keystore-stress")]
    if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        candidates.append(URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("keystore-stress"))
    }
    for bundle in Bundle.allBundles {
        candidates.append(bundle.bundleURL.deletingLastPathComponent().appendingPathComponent("keystore-stress"))
    }
    guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0.path) }) else {
        throw missingPrerequisite("keystore-stress helper not found next to the test bundle")
    }
    return found
}
