import ArgumentParser

@main
struct Federate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Swap identity-provider tokens for temporary AWS credentials.")
    func run() async throws {}
}
