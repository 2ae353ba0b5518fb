package import Foundation

/// Reads the fixtures of real Cognito (JSON) and STS (XML) response shapes in `Tests/Fixtures/`.
package enum Fixtures {
    /// `Tests/Fixtures`, found from this file's path so it works from any working directory.
    package static let directory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // BrokerTestSupport
        .deletingLastPathComponent()  // Tests
        .appendingPathComponent("Fixtures", isDirectory: true)

    /// The fixture file `name` (with or without `.json`; XML fixtures with `.xml`).
    package static func url(_ name: String) -> URL {
        directory.appendingPathComponent(name.hasSuffix(".json") || name.hasSuffix(".xml") ? name : "\(name).json")
    }

    /// Fixture `name` as UTF-8 text.
    package static func text(_ name: String) throws -> String {
        String(decoding: try data(name), as: UTF8.self)
    }

    /// The bytes of fixture `name`.
    package static func data(_ name: String) throws -> Data {
        try Data(contentsOf: url(name))
    }

    /// The bytes of fixture `name`, as the transport carries them.
    package static func bytes(_ name: String) throws -> [UInt8] {
        Array(try data(name))
    }

    /// Fixture `name` decoded with `JSONSerialization` as an object.
    package static func object(_ name: String) throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: data(name)) as? [String: Any] else {
            throw CocoaError(.fileReadCorruptFile)
        }
        return object
    }

    /// Every fixture's name (without `.json`), sorted.
    package static func names() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(".json") }
            .map { String($0.dropLast(5)) }
            .sorted()
    }
}
