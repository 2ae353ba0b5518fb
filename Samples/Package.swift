// swift-tools-version:6.1
import PackageDescription

// The samples are a package of their own beside the library (as async-http-client's
// `Examples/`), so that depending on IdentityBroker resolves only what the library needs, and
// so that the samples can use only the library's public API, as a user's code does.

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

/// A sample executable: the library's Federation, SampleSupport, ArgumentParser and `extra`.
func sample(_ name: String, path: String, _ extra: [Target.Dependency] = []) -> Target {
    .executableTarget(
        name: name,
        dependencies: [library("Federation"), "SampleSupport", argumentParser] + extra,
        path: path
    )
}

let package = Package(
    name: "IdentityBrokerSamples",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "sample-oidc", targets: ["sample-oidc"]),
        .executable(name: "sample-guest", targets: ["sample-guest"]),
        .executable(name: "sample-classic", targets: ["sample-classic"]),
        .executable(name: "sample-developer", targets: ["sample-developer"]),
        .executable(name: "sample-migration", targets: ["sample-migration"]),
        .executable(name: "sample-observe", targets: ["sample-observe"]),
        .executable(name: "sample-jobs", targets: ["sample-jobs"]),
    ],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .target(
            name: "SampleSupport",
            dependencies: [
                library("Federation"),
                argumentParser,
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "SampleSupport"
        ),
        sample("sample-oidc", path: "OIDCFederation"),
        sample("sample-guest", path: "GuestThenLogin"),
        sample("sample-classic", path: "ClassicFlow"),
        sample("sample-developer", path: "DeveloperAuthenticated"),
        sample("sample-migration", path: "AccessGroupMigration", [library("SecureStorage")]),
        sample("sample-observe", path: "ObserveSessions"),
        sample("sample-jobs", path: "JobRunner", [library("CredentialServer")]),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system && target.type != .binary {
    target.swiftSettings = (target.swiftSettings ?? []) + strictSettings
}
