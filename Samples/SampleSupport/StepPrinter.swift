/// Prints a sample's numbered steps on stdout, and indented detail lines under them:
///
///     1. Federate the token
///        identity ID:   us-east-1:…
///
/// It prints only what it is given: callers pass no token, secret key or session token.
public struct StepPrinter: Sendable {
    private var number = 0

    public init() {}

    /// Prints the next step, numbered from 1.
    public mutating func next(_ title: String) {
        number += 1
        print("\(number). \(title)")
    }

    /// Prints a detail line under the current step.
    public func detail(_ line: String) {
        print("   " + line)
    }
}
