// swift-tools-version:6.1
import PackageDescription

/// Settings every Swift target shares: Swift 6 language mode is set package-wide;
/// `ExistentialAny` keeps existential types explicit.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "IdentityBroker",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Federation", targets: ["Federation"]),
        .library(name: "SecureStorage", targets: ["SecureStorage"]),
        .library(name: "PostgresKeystore", targets: ["PostgresKeystore"]),
        .executable(name: "federate", targets: ["federate"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        // MARK: C system libraries (internal; never in a public signature)
        .systemLibrary(
            name: "CLibCurl",
            path: "Sources/CLibCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        .systemLibrary(
            name: "CLibCrypto",
            path: "Sources/CLibCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            path: "Sources/CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),

        // MARK: Library modules
        .target(
            name: "SecureStorage",
            dependencies: [
                "CLibCrypto",
                "CSQLite",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "Federation",
            dependencies: [
                "CLibCurl",
                "CLibCrypto",
                "SecureStorage",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // The fleet engine: the only target that links postgres-nio (and so NIO), so users of
        // Federation and SecureStorage alone never do.
        .target(
            name: "PostgresKeystore",
            dependencies: [
                "SecureStorage",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),

        // MARK: Samples
        .target(
            name: "SampleSupport",
            dependencies: [
                "Federation",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Samples/SampleSupport",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "federate",
            dependencies: [
                "Federation",
                "SecureStorage",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Samples/federate",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sample-oidc",
            dependencies: [
                "Federation",
                "SecureStorage",
                "SampleSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Samples/OIDCFederation",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sample-guest",
            dependencies: [
                "Federation",
                "SecureStorage",
                "SampleSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Samples/GuestThenLogin",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sample-developer",
            dependencies: [
                "Federation",
                "SecureStorage",
                "SampleSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Samples/DeveloperAuthenticated",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sample-migration",
            dependencies: [
                "Federation",
                "SecureStorage",
                "SampleSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Samples/AccessGroupMigration",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sample-observe",
            dependencies: [
                "Federation",
                "SecureStorage",
                "SampleSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Samples/ObserveSessions",
            swiftSettings: strictSettings
        ),

        // MARK: Benchmarks and fuzzing (not part of the test run)
        .executableTarget(
            name: "broker-bench",
            dependencies: [
                "Federation",
                "SecureStorage",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Benchmarks/BrokerBench",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "urlsession-bench",
            dependencies: [.product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Benchmarks/URLSessionBench",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "noop",
            path: "Benchmarks/Noop",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "broker-fuzz",
            dependencies: ["Federation"],
            path: "Fuzz/BrokerFuzz",
            swiftSettings: strictSettings
        ),

        // MARK: Tests
        .target(
            name: "BrokerTestSupport",
            dependencies: [
                "Federation",
                "SecureStorage",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ],
            path: "Tests/BrokerTestSupport",
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "FederationTests",
            dependencies: [
                "Federation",
                "SecureStorage",
                "BrokerTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "keystore-stress",
            dependencies: ["SecureStorage"],
            path: "Tests/KeystoreStress",
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "FederateCLITests",
            dependencies: [
                "federate",
                "Federation",
                "SecureStorage",
                "BrokerTestSupport",
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "PostgresKeystoreTests",
            dependencies: [
                "PostgresKeystore",
                "SecureStorage",
                "Federation",
                "BrokerTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SecureStorageTests",
            dependencies: [
                "SecureStorage",
                "keystore-stress",
                "BrokerTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
