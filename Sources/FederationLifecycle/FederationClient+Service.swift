public import Federation
public import ServiceLifecycle

/// A ``FederationClient`` runs as a swift-service-lifecycle `Service`: add it to a
/// `ServiceGroup` and its graceful shutdown (SIGTERM, say) shuts the client down.
///
/// ```swift
/// let client = try FederationClient(configuration: configuration, keystore: keystore, logger: logger)
/// let group = ServiceGroup(services: [client, httpServer], gracefulShutdownSignals: [.sigterm], logger: logger)
/// try await group.run()
/// ```
///
/// `run()` waits for graceful shutdown, then calls
/// ``FederationClient/shutdown(gracePeriod:)`` with a 10-second grace period: federations in
/// flight finish (or are cancelled at the deadline), timers and the change feed stop, the
/// transport thread stops.
extension FederationClient: Service {
    /// Waits for graceful shutdown (or cancellation), then shuts the client down.
    public func run() async throws {
        try? await gracefulShutdown()
        await shutdown()
    }
}
