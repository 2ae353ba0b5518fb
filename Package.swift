// swift-tools-version:6.1
import PackageDescription

/// Settings every Swift target shares, applied in one loop at the end (swift-log's way):
/// Swift 6 language mode is set package-wide; `ExistentialAny` keeps existential types
/// explicit; `MemberImportVisibility` makes every file import what it uses;
/// `InternalImportsByDefault` makes a plain `import` internal, so only `public import`s (where
/// a public signature needs the module) reach clients (docs/architecture.md, "Import policy").
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "IdentityBroker",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Federation", targets: ["Federation"]),
        .library(name: "SecureStorage", targets: ["SecureStorage"]),
        .library(name: "FederationLifecycle", targets: ["FederationLifecycle"]),
        .library(name: "CredentialServer", targets: ["CredentialServer"]),
        .library(name: "PostgresKeystore", targets: ["PostgresKeystore"]),
        .executable(name: "federate", targets: ["federate"]),
        .executable(name: "federate-server", targets: ["federate-server"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // Only CredentialServer (and federate-server through it) links Hummingbird; Federation,
        // SecureStorage and the `federate` front door stay free of it and of NIO. No traits:
        // swift-configuration is not needed.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: []),
        // The credential server's connection pipeline (both already Hummingbird's): NIOCore and
        // NIOHTTP1 for the HTTP/1 handlers, NIOHTTPTypesHTTP1 for the conversion to HTTP types.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        // Only PostgresKeystore links postgres-nio.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        // MARK: C system libraries (internal; never in a public signature)
        // Headers only, and no pkg-config: its `--libs` would link libcurl, which
        // CCurlLoader loads on first use instead.
        .systemLibrary(
            name: "CLibCurl",
            path: "Sources/CLibCurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // Resolves libcurl with dlopen on first use (see its header): processes that never
        // reach the network never load libcurl and its dependencies.
        .target(
            name: "CCurlLoader",
            dependencies: ["CLibCurl"],
            path: "Sources/CCurlLoader",
            linkerSettings: [.linkedLibrary("dl")]
        ),
        // Resolves libxml2's push parser with dlopen on first use (see its header): only the classic
        // flow's STS answers are XML, so no other process loads libxml2 and ICU behind it.
        .target(
            name: "CXMLLoader",
            path: "Sources/CXMLLoader",
            linkerSettings: [.linkedLibrary("dl")]
        ),
        // Process plumbing in C: posix_spawn's close-from file action (which glibc declares
        // only with _GNU_SOURCE), so `federate exec` starts its command with no descriptor of
        // its own open; the start-up hardening (`ib_start_process`, `ib_make_undumpable`); and
        // `exec`'s signal relay (SignalRelay.c).
        .target(
            name: "CProcessSpawn",
            path: "Sources/CProcessSpawn"
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
        // Keeps a process alive when another member of a shared group truncates a database's
        // `-shm` file under it (SIGBUS).
        .target(
            name: "CSQLiteGuard",
            dependencies: ["CSQLite"],
            path: "Sources/CSQLiteGuard"
        ),

        // MARK: Library modules
        .target(
            name: "SecureStorage",
            dependencies: [
                "CLibCrypto",
                "CSQLite",
                "CSQLiteGuard",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "Federation",
            dependencies: [
                "CCurlLoader",
                "CLibCrypto",
                "CXMLLoader",
                "SecureStorage",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),

        .target(
            name: "FederationLifecycle",
            dependencies: [
                "Federation",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "CredentialServer",
            dependencies: [
                "Federation",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The fleet engine: the only target that links postgres-nio (and so NIO), so users of
        // Federation and SecureStorage alone never do.
        .target(
            name: "PostgresKeystore",
            dependencies: [
                "SecureStorage",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // postgres-nio's own: named for its connection errors' types.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // MARK: The CLI (samples and benchmarks are packages of their own: Samples/, Benchmarks/)
        // The CLI's commands, shared by its two executables. Links the core only: what needs
        // NIO is reached through its `ServerSide` protocol (docs/architecture.md).
        .target(
            name: "FederateCLI",
            dependencies: [
                "Federation",
                "SecureStorage",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // `federate`, the front door AWS SDKs start before every call: no NIO, no postgres-nio.
        .executableTarget(
            name: "federate",
            dependencies: ["CProcessSpawn", "FederateCLI"]
        ),
        // `federate-server`: the same CLI with the credential server and the PostgreSQL
        // engine; `federate` replaces itself with it for `exec`, `serve` and postgres://.
        .executableTarget(
            name: "federate-server",
            dependencies: [
                "CProcessSpawn",
                "FederateCLI",
                "CredentialServer",
                "Federation",
                "PostgresKeystore",
                "SecureStorage",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),

        // MARK: Fuzzing (not part of the test run)
        .executableTarget(
            name: "broker-fuzz",
            dependencies: ["Federation", "SecureStorage"],
            path: "Fuzz/BrokerFuzz"
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
            path: "Tests/BrokerTestSupport"
        ),
        .testTarget(
            name: "FederationTests",
            dependencies: [
                "Federation",
                "FederationLifecycle",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                "SecureStorage",
                "BrokerTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "keystore-stress",
            dependencies: ["CSQLite", "CSQLiteGuard", "SecureStorage"],
            path: "Tests/KeystoreStress"
        ),
        .testTarget(
            name: "FederateCLITests",
            dependencies: [
                "CProcessSpawn",
                "FederateCLI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                "federate",
                "federate-server",
                "CredentialServer",
                "Federation",
                "PostgresKeystore",
                "SecureStorage",
                "BrokerTestSupport",
            ]
        ),
        .testTarget(
            name: "CredentialServerTests",
            dependencies: [
                "CredentialServer",
                "Federation",
                "SecureStorage",
                "BrokerTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                // The connection roster's handler, tested on channels without sockets.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
            ]
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
            ]
        ),
        .testTarget(
            name: "SecureStorageTests",
            dependencies: [
                "SecureStorage",
                "keystore-stress",
                "BrokerTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system && target.type != .binary {
    target.swiftSettings = (target.swiftSettings ?? []) + strictSettings
}
