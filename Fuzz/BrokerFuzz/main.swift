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

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    FuzzEntryPoints.run(bytes)
    return 0
}
#else
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

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
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        if name != "." && name != ".." { names.append(path + "/" + name) }
    }
    return names.sorted()
}

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
#endif
