import Dispatch
import FederateCLI

/// `federate`: the CLI's front door (FederateCLI), linking the core only. `exec`, `serve`
/// and `postgres://` keystores are handed to `federate-server`, installed next to it.
///
/// A synchronous `main`: the cache hit (`federate credentials`, run before every AWS call)
/// finishes on the main thread before any task starts; `serve` is handed over before that;
/// everything else runs in a task.
@main
enum FederateFrontDoor {
    static func main() {
        SiblingServer.handOverServeAtOnce()
        Federate.runCacheHitAtOnce(serverSide: SiblingServer())
        Task { await Federate.main(serverSide: SiblingServer()) }
        dispatchMain()
    }
}
