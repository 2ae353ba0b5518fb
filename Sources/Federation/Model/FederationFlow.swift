/// Which Cognito Identity authflow a federation runs.
///
/// - ``enhanced`` (the default): `GetId`, then `GetCredentialsForIdentity`. Cognito picks
///   the role from the pool's settings and rules (or ``FederationOptions/customRoleArn``)
///   and returns the credentials.
/// - ``classic(_:)`` (the "basic" authflow): `GetId`, then `GetOpenIdToken`, then STS
///   `AssumeRoleWithWebIdentity` with the Cognito OpenID token, for the role the caller
///   names in ``ClassicFlowOptions``; the caller can scope the session further with a
///   session policy and a duration. The pool must have the classic flow enabled.
///
/// A struct rather than an enum, so new flows can be added without breaking a `switch`.
public struct FederationFlow: Sendable, Hashable, CustomStringConvertible {
    private enum Kind: Sendable, Hashable {
        case enhanced
        case classic(ClassicFlowOptions)
    }

    private let kind: Kind

    private init(_ kind: Kind) { self.kind = kind }

    /// The enhanced (simplified) authflow: Cognito returns the credentials. The default.
    public static let enhanced = FederationFlow(.enhanced)

    /// The classic (basic) authflow: STS assumes `options.roleArn` with the identity's
    /// Cognito OpenID token.
    public static func classic(_ options: ClassicFlowOptions) -> FederationFlow {
        FederationFlow(.classic(options))
    }

    /// The classic flow's options, or `nil` for the enhanced flow.
    public var classicOptions: ClassicFlowOptions? {
        if case .classic(let options) = kind { return options }
        return nil
    }

    /// `enhanced` or `classic`.
    public var description: String { classicOptions == nil ? "enhanced" : "classic" }
}
