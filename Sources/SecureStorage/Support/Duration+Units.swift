/// `Duration` in the units the system and library calls below the package take, once for
/// the whole package: libcurl and SQLite want milliseconds, `usleep` microseconds, Dispatch
/// and swift-metrics nanoseconds, `Date` arithmetic seconds as a `Double`.
extension Duration {
    /// Seconds as a floating-point number (a `TimeInterval`).
    @inlinable
    package var timeInterval: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// Whole milliseconds, truncated toward zero, saturating at `Int64`'s bounds.
    @inlinable
    package var wholeMilliseconds: Int64 { whole(perSecond: 1_000) }

    /// Whole microseconds, truncated toward zero, saturating at `Int64`'s bounds.
    @inlinable
    package var wholeMicroseconds: Int64 { whole(perSecond: 1_000_000) }

    /// Whole nanoseconds, truncated toward zero, saturating at `Int64`'s bounds.
    @inlinable
    package var wholeNanoseconds: Int64 { whole(perSecond: 1_000_000_000) }

    /// Saturating rather than trapping: a configured `.seconds(Int64.max)` means "forever",
    /// not a crash.
    @usableFromInline
    func whole(perSecond units: Int64) -> Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: units)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, sumOverflow) = scaled.addingReportingOverflow(attoseconds / (1_000_000_000_000_000_000 / units))
        if sumOverflow { return seconds < 0 ? .min : .max }
        return sum
    }
}
