/// A transport that attaches one ``CancellationSignal`` to every request it passes on, so
/// that firing the signal ends all of them: how a client's shutdown reaches the transfers
/// of the federations in flight.
struct SignalledTransport: HTTPTransport {
    let base: any HTTPTransport
    let signal: CancellationSignal

    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        var request = request
        request.cancellation = signal
        return try await base.send(request)
    }
}
