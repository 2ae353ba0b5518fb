/// The identity provider that issued a token, which decides the key it is sent
/// under in Cognito's `Logins` map.
///
/// ```swift
/// let provider = AuthProvider.oidc(issuer: "login.example.com")
/// provider.loginsKey // "login.example.com"
/// ```
public enum AuthProvider: Sendable, Hashable {
    /// Facebook access token (`graph.facebook.com`).
    case facebook
    /// Google ID token, a JWT (`accounts.google.com`).
    case google
    /// Login with Amazon access token (`www.amazon.com`).
    case amazon
    /// Sign in with Apple ID token, a JWT (`appleid.apple.com`).
    case apple
    /// Twitter `token;secret` pair (`api.twitter.com`).
    case twitter
    /// An OpenID Connect ID token, a JWT; `issuer` is the provider name configured
    /// on the pool, e.g. `login.example.com`.
    case oidc(issuer: String)
    /// A base64 SAML assertion; `arn` is the SAML provider's ARN.
    case saml(arn: String)
    /// Any other provider, sent under `key` as given.
    case custom(key: String)
    /// An OpenID token your backend minted with `GetOpenIdTokenForDeveloperIdentity`
    /// (`cognito-identity.amazonaws.com`).
    case developer

    /// The key this provider's token goes under in Cognito's `Logins` map.
    public var loginsKey: String {
        switch self {
        case .facebook: "graph.facebook.com"
        case .google: "accounts.google.com"
        case .amazon: "www.amazon.com"
        case .apple: "appleid.apple.com"
        case .twitter: "api.twitter.com"
        case .oidc(let issuer): issuer
        case .saml(let arn): arn
        case .custom(let key): key
        case .developer: "cognito-identity.amazonaws.com"
        }
    }

    /// Whether the provider's tokens are JWTs, which are checked locally
    /// (well-formed, not long expired) before any network call.
    public var issuesJWT: Bool {
        switch self {
        case .google, .apple, .oidc, .developer: true
        case .facebook, .amazon, .twitter, .saml, .custom: false
        }
    }

    /// A stable text form: `google`, `oidc:ISSUER`, `saml:ARN`, `custom:KEY`, ….
    ///
    /// It round-trips through ``init(identifier:)`` and is what the `federate`
    /// CLI's `--provider` option and saved sessions use.
    public var identifier: String {
        switch self {
        case .facebook: "facebook"
        case .google: "google"
        case .amazon: "amazon"
        case .apple: "apple"
        case .twitter: "twitter"
        case .oidc(let issuer): "oidc:\(issuer)"
        case .saml(let arn): "saml:\(arn)"
        case .custom(let key): "custom:\(key)"
        case .developer: "developer"
        }
    }

    /// The provider without what it names (an issuer, an ARN, a key): ``identifier`` up to
    /// its first `:`. A metric label, with a handful of values whatever callers pass.
    var kind: String {
        switch self {
        case .oidc: "oidc"
        case .saml: "saml"
        case .custom: "custom"
        default: identifier
        }
    }

    /// Parses the form ``identifier`` produces; `nil` when it names no provider
    /// or a parameterised provider has an empty parameter.
    public init?(identifier: String) {
        switch identifier {
        case "facebook": self = .facebook
        case "google": self = .google
        case "amazon": self = .amazon
        case "apple": self = .apple
        case "twitter": self = .twitter
        case "developer": self = .developer
        default:
            guard let colon = identifier.firstIndex(of: ":") else { return nil }
            let kind = identifier[..<colon]
            let parameter = String(identifier[identifier.index(after: colon)...])
            guard !parameter.isEmpty else { return nil }
            switch kind {
            case "oidc": self = .oidc(issuer: parameter)
            case "saml": self = .saml(arn: parameter)
            case "custom": self = .custom(key: parameter)
            default: return nil
            }
        }
    }
}

extension AuthProvider: CustomStringConvertible {
    /// The ``identifier``; provider names are not secret.
    public var description: String { identifier }
}
