/// A state change of one session, as the all-sessions stream delivers it.
public struct SessionEvent: Sendable, Hashable {
    /// The session that changed.
    public var session: String
    /// Its new state.
    public var state: SessionState

    /// Creates an event.
    public init(session: String, state: SessionState) {
        self.session = session
        self.state = state
    }
}
