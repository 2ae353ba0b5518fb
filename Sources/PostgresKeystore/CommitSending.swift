import Synchronization

/// Whether a commit's statement may have reached the server, decided once between the call
/// that sends it and the caller that gives up on it.
///
/// A caller resumed at its deadline leaves the operation running; without this, the body
/// could send the statement after the caller concluded it never had, and a commit landing
/// late would open no uncertain window.
final class CommitSending: Sendable {
    private static let idle: UInt8 = 0
    private static let sent: UInt8 = 1
    private static let abandoned: UInt8 = 2
    private let state = Atomic<UInt8>(idle)

    /// Called before the statement is sent; `false` once the caller gave up, and then it
    /// must not be sent. A retry after a first send may send again.
    func mayBeSent() -> Bool {
        let (exchanged, original) = state.compareExchange(expected: Self.idle, desired: Self.sent, ordering: .acquiringAndReleasing)
        return exchanged || original == Self.sent
    }

    /// Called by the caller that gives up; returns whether the statement may have been sent.
    func giveUp() -> Bool {
        let (exchanged, original) = state.compareExchange(expected: Self.idle, desired: Self.abandoned, ordering: .acquiringAndReleasing)
        return !exchanged && original == Self.sent
    }
}

/// The caller of a commit gave up before its statement was sent; it never will be.
struct CommitAbandoned: Error, CustomStringConvertible {
    var description: String { "the commit was given up before it was sent" }
}
