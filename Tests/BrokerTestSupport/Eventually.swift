/// Waits until `condition` holds or `timeout` passes, asking every 5 ms; returns whether it
/// held. A timeout is a bound for a loaded machine, not a figure the test measures: a test
/// on time-bound behaviour measures that itself.
package func eventually(timeout: Duration = .seconds(5), _ condition: @Sendable () async -> Bool) async -> Bool {
    let start = ContinuousClock.now
    while ContinuousClock.now - start < timeout {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return await condition()
}
