// keystore-stress: a helper process for SecureStorageTests.
//
//   keystore-stress write ROOT SERVICE WORKER COUNT
//       writes w<WORKER>-<i> = "value-<WORKER>-<i>" for i < COUNT, overwriting "shared" each time
//   keystore-stress overwrite ROOT SERVICE KEYS
//       prints "ready", then rewrites k0..k<KEYS-1> with "gen-<n>-<padding>" forever (until killed)
//   keystore-stress migrate-crash ROOT SERVICE FROM TO STAGE N
//       migrates FROM to TO ("none" or a group name) and SIGKILLs itself at checkpoint STAGE/N
//       (STAGE: copied, committed, deleted)
//   keystore-stress shared ROOT SERVICE GROUP KEY
//       in access group GROUP: writes KEY = "from-<uid>", then prints every "key=value"
//       (run under different uids of one Unix group to check sharing)
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@_spi(Testing) import SecureStorage

func fail(_ message: String) -> Never {
    let line = Array("keystore-stress: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(2)
}

func group(_ text: String) -> AccessGroup {
    text == "none" ? .none : AccessGroup(name: text)
}

let arguments = CommandLine.arguments
guard arguments.count >= 2 else { fail("usage: keystore-stress write|overwrite|migrate-crash …") }

do {
    switch arguments[1] {
    case "write":
        guard arguments.count == 6, let worker = Int(arguments[4]), let count = Int(arguments[5]) else { fail("bad arguments") }
        let keystore = try FileKeystore(root: arguments[2], service: arguments[3])
        for index in 0..<count {
            try keystore.set(Array("value-\(worker)-\(index)".utf8), forKey: "w\(worker)-\(index)")
            try keystore.set(Array("worker-\(worker)-\(index)".utf8), forKey: "shared")
        }
    case "overwrite":
        guard arguments.count == 5, let keys = Int(arguments[4]) else { fail("bad arguments") }
        let keystore = try FileKeystore(root: arguments[2], service: arguments[3])
        let ready = Array("ready\n".utf8)
        _ = ready.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
        let padding = String(repeating: "x", count: 300)
        var generation = 1
        while true {
            for key in 0..<keys {
                try keystore.set(Array("gen-\(generation)-\(padding)".utf8), forKey: "k\(key)")
            }
            generation += 1
        }
    case "migrate-crash":
        guard arguments.count == 8, let target = Int(arguments[7]) else { fail("bad arguments") }
        let stage = arguments[6]
        try FileKeystore._migrate(
            root: arguments[2], service: arguments[3],
            from: group(arguments[4]), to: group(arguments[5])
        ) { name, count in
            if name == stage && count == target { kill(getpid(), SIGKILL) }
        }
        fail("checkpoint \(stage)/\(target) was never reached")
    case "shared":
        guard arguments.count == 6 else { fail("bad arguments") }
        let keystore = try FileKeystore(root: arguments[2], service: arguments[3], accessGroup: AccessGroup(name: arguments[4]))
        try keystore.set(Array("from-\(getuid())".utf8), forKey: arguments[5])
        var lines = ""
        for key in try keystore.keys() {
            lines += "\(key)=\(String(decoding: try keystore.requireData(forKey: key), as: UTF8.self))\n"
        }
        let bytes = Array(lines.utf8)
        _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
    default:
        fail("unknown mode \(arguments[1])")
    }
} catch {
    fail("\(error)")
}
