import FederateCLI

/// `federate`: the CLI's front door (FederateCLI), linking the core only. `exec`, `serve`
/// and `postgres://` keystores are handed to `federate-server`, installed next to it.
@main
enum FederateFrontDoor {
    static func main() async {
        await Federate.main(serverSide: SiblingServer())
    }
}
