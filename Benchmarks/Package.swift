// swift-tools-version:6.1
import PackageDescription

// The benchmarks are a package of their own beside the library (as swift-nio's
// `Benchmarks/`): depending on IdentityBroker never resolves what only they need, and they
// measure the library through its public API alone. `compare.sh` builds and runs them.

/// The root package's shared settings (see the loop at the end of ../Package.swift).
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

/// The root package's identity: a path dependency is known by the name of its directory,
/// which differs between clones and worktrees, so it is read rather than spelled.
let libraryPackage = String(Context.packageDirectory.split(separator: "/").dropLast().last!)

/// A product of the library (the root package).
func library(_ product: String) -> Target.Dependency {
    .product(name: product, package: libraryPackage)
}

let argumentParser = Target.Dependency.product(name: "ArgumentParser", package: "swift-argument-parser")

let package = Package(
    name: "IdentityBrokerBenchmarks",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "broker-bench", targets: ["broker-bench"]),
        .executable(name: "urlsession-bench", targets: ["urlsession-bench"]),
        .executable(name: "noop", targets: ["noop"]),
    ],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .executableTarget(
            name: "broker-bench",
            dependencies: [library("Federation"), library("PostgresKeystore"), library("SecureStorage"), argumentParser, "ClosedLoop"],
            path: "BrokerBench"
        ),
        // The URLSession comparison: Foundation only, no IdentityBroker.
        .executableTarget(
            name: "urlsession-bench",
            dependencies: [argumentParser, "ClosedLoop"],
            path: "URLSessionBench"
        ),
        // The callers both in-process benchmarks run their calls from.
        .target(
            name: "ClosedLoop",
            path: "ClosedLoop"
        ),
        // The start-up floor the CLI is compared with: an executable that does nothing.
        .executableTarget(
            name: "noop",
            path: "Noop"
        ),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system && target.type != .binary {
    target.swiftSettings = (target.swiftSettings ?? []) + strictSettings
}
