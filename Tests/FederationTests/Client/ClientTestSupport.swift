import BrokerTestSupport
@testable import Federation
import Foundation
import SecureStorage
import Logging
import Synchronization
import XCTest

/// A pool ID in `us-east-1`.
let testPoolId = "us-east-1:11111111-2222-3333-4444-555555555555"
/// An explicit endpoint no test ever reaches (the transport is the fake).
let testEndpoint = "https://cognito-identity.test.invalid/"
/// The fake clock's start; the fake's default credentials expire an hour later.
let testEpoch = Date(timeIntervalSince1970: 1_700_000_000)

extension TestClock {
    /// A clock at ``testEpoch``.
    convenience init() { self.init(testEpoch) }
}

/// A retry runner that never sleeps.
func noSleepRunner(_ policy: RetryPolicy = .standard) -> RetryRunner {
    RetryRunner(policy: policy, quota: RetryQuota(policy: policy), sleep: { _ in }, random: { 0 })
}

/// A client wired to a ``FakeCognito`` and a ``TestClock``.
struct Harness {
    let fake: FakeCognito
    let clock: TestClock
    let client: FederationClient

    init(
        configure: (inout FederationConfiguration) -> Void = { _ in },
        fake: FakeCognito = FakeCognito(expiration: testEpoch.addingTimeInterval(3600)),
        clock: TestClock = TestClock(),
        retry: RetryPolicy = .standard,
        environment: [String: String] = [:],
        keystore: any Keystore = InMemoryKeystore(),
        logger: Logger? = nil
    ) throws {
        var configuration = FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint)
        configure(&configuration)
        self.fake = fake
        self.clock = clock
        client = try FederationClient(
            configuration: configuration,
            transport: fake.transport,
            keystore: keystore,
            environment: environment,
            retryRunner: noSleepRunner(retry),
            now: clock.function,
            logger: logger
        )
    }
}

/// Collects up to `count` elements of `stream`, giving up after `timeout`;
/// returns what arrived.
func collect<Element: Sendable>(
    _ count: Int,
    from stream: AsyncStream<Element>,
    timeout: Duration = .seconds(5)
) async -> [Element] {
    let box = LockedBox<[Element]>([])
    await withTaskGroup(of: Void.self) { group in
        group.addTask {
            for await element in stream {
                let done = box.value.withLock { items -> Bool in
                    items.append(element)
                    return items.count >= count
                }
                if done { return }
            }
        }
        group.addTask {
            try? await Task.sleep(for: timeout)
        }
        await group.next()
        group.cancelAll()
    }
    return box.value.withLock { $0 }
}

