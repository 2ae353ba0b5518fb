import CProcessSpawn
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
        // Before any descriptor is opened: closed standard descriptors filled, SIGPIPE
        // ignored, and the process made non-dumpable (every command holds a secret at some
        // point: the token `login` reads, the keystore key, the credentials `credentials`
        // prints; no core dump and no other process of the user, through ptrace or
        // /proc/<pid>/mem or environ, may read them). An `exec` into federate-server, or a
        // command's, makes a process dumpable again.
        _ = ib_start_process()
        SiblingServer.handOverServeAtOnce()
        Federate.runCacheHitAtOnce(serverSide: SiblingServer())
        Task { await Federate.main(serverSide: SiblingServer()) }
        dispatchMain()
    }
}
