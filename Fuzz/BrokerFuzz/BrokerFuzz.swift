// broker-fuzz: a libFuzzer target over the code that reads untrusted bytes
// (Cognito response and error decoding, Retry-After parsing, JWT parsing).
//
// Built by scripts/fuzz.sh with `-DFUZZING -sanitize=fuzzer,address
// -parse-as-library` in `.build-fuzz`: libFuzzer then supplies `main` and calls
// `LLVMFuzzerTestOneInput` below. In an ordinary `swift build` this is a plain
// executable that replays the files (or directories of files) given as
// arguments through the same entry point, e.g. to re-run a crash artifact or a
// corpus without the fuzzing runtime.
import Federation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

#if FUZZING
/// libFuzzer calls this once per input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    FuzzEntryPoints.run(bytes)
    return 0
}

/// The process entry point under `-sanitize=fuzzer`.
///
/// SwiftPM links ELF executables with `--defsym main=broker_fuzz_main` (so tests
/// can link executables), and `-parse-as-library` with no `@main` emits no
/// `broker_fuzz_main`: the link fails with an undefined symbol. Defining it here
/// and handing over to libFuzzer's documented driver entry point
/// (`LLVMFuzzerRunDriver`, found with `dlsym` so it is called with the C
/// convention) runs libFuzzer exactly as its own `main` would.
@_cdecl("broker_fuzz_main")
public func brokerFuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    typealias TestOneInput = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
    typealias RunDriver = @convention(c) (
        UnsafeMutablePointer<Int32>,
        UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        TestOneInput
    ) -> Int32
    guard let symbol = dlsym(nil, "LLVMFuzzerRunDriver") else {
        print("broker-fuzz: LLVMFuzzerRunDriver not found; build with -sanitize=fuzzer")
        return 2
    }
    var argc = argc
    var argv = argv
    return unsafeBitCast(symbol, to: RunDriver.self)(&argc, &argv, fuzzOneInput)
}
#else

/// The bytes of the regular file at `path`, or `nil`.
func readFile(_ path: String) -> [UInt8]? {
    guard let file = fopen(path, "rb") else { return nil }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = fread(&buffer, 1, buffer.count, file)
        if count > 0 { bytes.append(contentsOf: buffer[..<count]) }
        if count < buffer.count { break }
    }
    return ferror(file) == 0 ? bytes : nil
}

/// The files named by `path`: itself, or the entries of a directory.
func inputs(at path: String) -> [String] {
    guard let directory = opendir(path) else { return [path] }
    defer { closedir(directory) }
    var names: [String] = []
    while let entry = readdir(directory) {
        // Read the name in place: a record can be shorter than `dirent`, so
        // copying the whole 256-byte `d_name` may read past it (ASan finds that).
        let offset = MemoryLayout<dirent>.offset(of: \dirent.d_name) ?? 19
        let name = String(cString: UnsafeRawPointer(entry).advanced(by: offset).assumingMemoryBound(to: CChar.self))
        if name != "." && name != ".." { names.append(path + "/" + name) }
    }
    return names.sorted()
}

/// Replays inputs through the same entry point as the fuzzer.
@main
enum BrokerFuzz {
    static func main() {
        let arguments = CommandLine.arguments.dropFirst()
        if arguments.isEmpty {
            print("usage: broker-fuzz FILE|DIRECTORY...  (replays inputs; scripts/fuzz.sh builds the libFuzzer variant)")
            exit(2)
        }
        var replayed = 0
        for path in arguments.flatMap(inputs(at:)) {
            guard let bytes = readFile(path) else {
                print("broker-fuzz: cannot read \(path)")
                exit(1)
            }
            FuzzEntryPoints.run(bytes)
            replayed += 1
        }
        print("broker-fuzz: replayed \(replayed) input(s) without a failure")
    }
}
#endif
