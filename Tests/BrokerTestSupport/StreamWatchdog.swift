package import Federation

/// Shuts `clients` down after `limit` unless cancelled first. Their state and event streams
/// then end, so a test awaiting an element that never comes fails on the `nil` it gets
/// instead of hanging the whole run. Cancel it (`defer { watchdog.cancel() }`) when the test
/// ends in time.
package func streamWatchdog(_ clients: FederationClient..., after limit: Duration = .seconds(60)) -> Task<Void, Never> {
    Task {
        try? await Task.sleep(for: limit)
        guard !Task.isCancelled else { return }
        for client in clients { await client.shutdown() }
    }
}
