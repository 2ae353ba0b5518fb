public import Federation
public import ServiceLifecycle

/// A ``FederationClient`` runs as a swift-service-lifecycle `Service`: add it to a
/// `ServiceGroup` and its graceful shutdown (SIGTERM, say) shuts the client down.
///
/// ```swift
/// let client = try FederationClient(configuration: configuration, keystore: keystore, logger: logger)
/// let group = ServiceGroup(services: [client, httpServer], gracefulShutdownSignals: [.sigterm], logger: logger)
/// try await group.run()
/// keystore.close()   // the client has shut down; the store is yours to close
/// ```
///
/// `run()` waits for graceful shutdown, then calls
/// ``FederationClient/shutdown(gracePeriod:)`` with a 10-second grace period: federations in
/// flight finish (or are cancelled at the deadline), timers and the change feed stop, the
/// transport thread stops. When the group cancels it (another service failed, or the group
/// escalated past its graceful-shutdown time, before or during this shutdown), the grace
/// period ends there: federations in flight are cancelled at once, and `run()` returns
/// without waiting out 10 seconds the group no longer gives.
extension FederationClient: Service {
    /// Waits for graceful shutdown (or cancellation), then shuts the client down.
    public func run() async throws {
        try? await gracefulShutdown()
        await withTaskCancellationHandler {
            await shutdown()
        } onCancel: {
            Task { await self.cutShutdownGracePeriod() }
        }
    }
}
