/// Waits until `condition` holds or `timeout` passes, asking every `interval`; returns
/// whether it held. A timeout is a bound for a loaded machine, not a figure the test
/// measures: a test of time-bound behaviour measures that itself.
package func eventually(
    timeout: Duration = .seconds(5), every interval: Duration = .milliseconds(5), _ condition: @Sendable () async -> Bool
) async -> Bool {
    let start = ContinuousClock.now
    // A cancelled caller stops asking (its sleeps would end at once, spinning a core).
    while ContinuousClock.now - start < timeout, !Task.isCancelled {
        if await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return await condition()
}
