import CProcessSpawn
import CredentialServer
import FederateCLI
import Federation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `federate exec`'s work: serve the session on loopback, run the command with the two
/// variables, forward signals, pass on its status.
enum ExecRunner {
    /// The signals forwarded to the command: the stops (SIGINT, SIGTERM, SIGHUP, SIGQUIT) and
    /// those a supervisor sends to ask a program for something (SIGUSR1, SIGUSR2, SIGALRM).
    /// Each would otherwise end `federate` (their default action), leaving the command
    /// running with an endpoint that is gone, whose port another local user could then take.
    static let forwardedSignals = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM]

    static func run(_ exec: Exec) async throws(CLIFailure) -> Never {
        let common = exec.common, command = exec.command
        let shadowing = DefaultProfileCheck.findings()
        if !shadowing.isEmpty {
            throw DefaultProfileCheck.failure(shadowing, session: common.session)
        }
        let javaOptions = JavaOptionsCheck.findings()
        if !javaOptions.isEmpty {
            throw JavaOptionsCheck.failure(javaOptions, session: common.session)
        }
        let served = try await ServedSession(common, requireCredentials: true)
        let serving = Task { try await served.server.run() }
        let code: Int32
        do throws(CLIFailure) {
            let endpoint = try await served.endpoint()
            // Trapped before the command starts, so no signal between spawn and forwarding is lost.
            let relay: SignalRelay
            do {
                relay = try SignalRelay(trapping: Self.forwardedSignals.filter { !InheritedSignals.ignoredAtStart.contains($0) })
            } catch {
                throw CLIFailure(.internalError, "cannot trap signals for the command: \(String(cString: strerror(error.code))); please report it")
            }
            if let signal = relay.pendingStop() {
                // Ctrl-C (or a stop) before the command started: it is not started.
                await Self.stop(served.server, serving)
                await OpenKeystores.closeAll()
                Terminal.exit(code: 128 + signal)
            }
            let child: ChildProcess
            do {
                child = try ChildProcess.spawn(
                    RawArguments.trailing(matching: command), environment: Self.childEnvironment(endpoint), keeping: InheritedDescriptors.atStart,
                    ignoring: InheritedSignals.ignoredAtStart, whenForked: ib_signal_relay_command_started)
            } catch {
                throw Self.spawnFailure(command[0], error)
            }
            relay.forward(to: child)
            // Forwarding stops before the command is reaped: until then its process ID is its own.
            await child.waitForExit()
            relay.stop()
            code = child.reap()
        } catch {
            await Self.stop(served.server, serving)
            throw error
        }
        await Self.stop(served.server, serving)
        await OpenKeystores.closeAll()
        Terminal.exit(code: code)
    }

    private static func stop(_ server: CredentialServer, _ serving: Task<Void, any Error>) async {
        await server.shutdown()
        _ = await serving.result
    }

    /// This process's environment, less the variables that would take precedence over the
    /// endpoint and the broker's own secrets, plus the two that name the endpoint: `NAME=VALUE`
    /// entries in bytes, in `environ`'s order, values passed on unchanged even when they are
    /// not UTF-8.
    ///
    /// The command gets one session through the endpoint, never the keystore: the keystore
    /// key (`$IDENTITY_BROKER_KEY`, or the passphrase or key file it comes from) opens every
    /// session, and a `postgres://` keystore URL carries the database password.
    static func childEnvironment(_ endpoint: CredentialEndpoint) -> [[UInt8]] {
        let replaced = Set(endpoint.environment.keys.map { Array($0.utf8) })
        let equals = UInt8(ascii: "=")
        let metadataName = Array(CredentialEndpoint.instanceMetadataDisabledVariable.utf8)
        var metadataInherited: String?
        var seen = Set<[UInt8]>()
        var entries: [[UInt8]] = []
        var cursor = environ
        while let entry = cursor.pointee {
            cursor += 1
            let bytes = Array(UnsafeRawBufferPointer(start: entry, count: strlen(entry)))
            // An entry without "=" is no variable; getenv(3) never finds it either.
            guard let split = bytes.firstIndex(of: equals) else { continue }
            let name = Array(bytes[..<split])
            // The first of repeated names wins, as for getenv(3).
            guard seen.insert(name).inserted, !replaced.contains(name) else { continue }
            if name == metadataName {
                metadataInherited = String(decoding: bytes[(split + 1)...], as: UTF8.self)
                continue  // added below, as the caller chose or as the endpoint needs
            }
            if CredentialEndpoint.withholds(name, value: bytes[(split + 1)...]) { continue }
            entries.append(bytes)
        }
        var added = endpoint.environment.sorted { $0.key < $1.key }.map { Array("\($0.key)=\($0.value)".utf8) }
        // Unless the caller decided otherwise, the command's SDK must not fall back to the
        // instance's role when the endpoint answers no credentials (see the variable's doc).
        let metadata = CredentialEndpoint.instanceMetadataSetting(inherited: metadataInherited)
        added.append(metadataName + Array("=\(metadata)".utf8))
        return entries + added
    }

    private static func spawnFailure(_ name: String, _ failure: ChildProcess.SpawnFailure) -> CLIFailure {
        let reason = String(cString: strerror(failure.code))
        guard failure.whileRunning else {
            // Not the command's fault: the system could not start a process (overcommit
            // refused the fork, a process or descriptor limit), or refused the binding to `federate`.
            return CLIFailure(.commandNotExecutable, "cannot start '\(name)': \(reason) (while preparing its process); nothing was run")
        }
        if failure.code == ENOENT {
            return CLIFailure(.commandNotFound, "cannot run '\(name)': \(reason); check the command name and PATH")
        }
        return CLIFailure(.commandNotExecutable, "cannot run '\(name)': \(reason); check that it is an executable file")
    }
}
