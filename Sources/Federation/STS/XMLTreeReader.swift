import CXMLLoader

/// Reads a small XML body into an ``XMLElementNode`` tree with libxml2's SAX2 parser,
/// loaded on first use (CXMLLoader), so that no process links Foundation's XML stack, or
/// libxml2 and ICU, for a parser only the classic flow needs.
///
/// Bounded: the transport already caps the body; here depth, element count and text per
/// element are capped too, and a document type declaration is refused before parsing, so
/// no entity can expand. Nothing is fetched (`XML_PARSE_NONET`, no DTD loading) and
/// libxml2 reports nothing on stderr.
enum XMLTreeReader {
    static let maxDepth = 16
    static let maxElements = 1_024
    static let maxTextBytes = 64 * 1_024
    /// libxml2's error codes for input that stops early.
    static let endOfDataCodes: Set<Int32> = [5, 73, 77]

    /// The document's root element.
    static func read(_ body: [UInt8]) throws(XMLReadError) -> XMLElementNode {
        guard body.contains(where: { !($0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D) }) else {
            throw XMLReadError(kind: .empty, path: "")
        }
        if containsDeclaration(body) {
            throw XMLReadError(kind: .documentTypeDeclaration, path: "")
        }
        guard ib_xml_load() == 1 else {
            throw XMLReadError(kind: .parserUnavailable(String(cString: ib_xml_load_error())), path: "")
        }
        guard body.count <= Int(Int32.max) else { throw XMLReadError(kind: .tooLarge, path: "") }
        let collector = TreeCollector()
        let ran = withExtendedLifetime(collector) {
            body.withUnsafeBufferPointer { bytes in
                var events = ib_xml_events(
                    context: Unmanaged.passUnretained(collector).toOpaque(),
                    start_element: { context, name in
                        TreeCollector.from(context).start(name.map { String(cString: $0) } ?? "")
                    },
                    end_element: { context in TreeCollector.from(context).end() },
                    characters: { context, bytes, length in
                        guard let bytes, length > 0 else { return 0 }
                        let text = UnsafeRawBufferPointer(start: bytes, count: Int(length))
                        return TreeCollector.from(context).characters(String(decoding: text, as: UTF8.self))
                    },
                    error: { context, code in TreeCollector.from(context).error(code) }
                )
                let start = UnsafeRawPointer(bytes.baseAddress!).assumingMemoryBound(to: CChar.self)
                return ib_xml_parse(start, Int32(bytes.count), &events)
            }
        }
        if let limit = collector.limit { throw limit }
        guard ran == 0 else { throw XMLReadError(kind: .malformed, path: "") }
        // libxml2 recovers from some errors and goes on, so the first error decides: one
        // that means "the data ended" (XML_ERR_DOCUMENT_END 5, XML_ERR_GT_REQUIRED 73,
        // XML_ERR_TAG_NOT_FINISHED 77) while elements were open is a truncated body;
        // anything else (a mismatched closing tag is 76) is malformed.
        if let first = collector.firstError {
            if Self.endOfDataCodes.contains(first.code), !first.path.isEmpty {
                throw XMLReadError(kind: .truncated, path: first.path)
            }
            throw XMLReadError(kind: .malformed, path: first.path)
        }
        if !collector.open.isEmpty {
            throw XMLReadError(kind: .truncated, path: collector.path(collector.open))
        }
        if collector.roots.count != 1 {
            throw XMLReadError(kind: .malformed, path: "")
        }
        return collector.roots[0]
    }

    /// Whether the body holds `<!DOCTYPE` or `<!ENTITY` (any case).
    private static func containsDeclaration(_ body: [UInt8]) -> Bool {
        let markers: [[UInt8]] = [Array("<!doctype".utf8), Array("<!entity".utf8)]
        guard body.count >= 8 else { return false }
        for start in body.indices where body[start] == UInt8(ascii: "<") {
            for marker in markers where start + marker.count <= body.count {
                var matches = true
                for offset in 0..<marker.count {
                    let byte = body[start + offset]
                    let folded = byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
                    if folded != marker[offset] { matches = false; break }
                }
                if matches { return true }
            }
        }
        return false
    }

    /// Builds the tree as the parser reports elements. Used on one thread, during one
    /// `ib_xml_parse` call; a limit stops the parse (a non-zero return).
    private final class TreeCollector {
        var open: [XMLElementNode] = []
        var roots: [XMLElementNode] = []
        var elements = 0
        var limit: XMLReadError?
        var firstError: (code: Int32, path: String)?

        static func from(_ context: UnsafeMutableRawPointer?) -> TreeCollector {
            Unmanaged<TreeCollector>.fromOpaque(context!).takeUnretainedValue()
        }

        func path(_ nodes: [XMLElementNode]) -> String {
            nodes.map { String($0.name.prefix(64)) }.joined(separator: "/")
        }

        func start(_ name: String) -> Int32 {
            elements += 1
            guard open.count < XMLTreeReader.maxDepth, elements <= XMLTreeReader.maxElements else { return stop() }
            open.append(XMLElementNode(name: name))
            return 0
        }

        func characters(_ string: String) -> Int32 {
            guard !open.isEmpty else { return 0 }
            guard open[open.count - 1].text.utf8.count + string.utf8.count <= XMLTreeReader.maxTextBytes else { return stop() }
            open[open.count - 1].text += string
            return 0
        }

        func end() {
            guard let node = open.popLast() else { return }
            if open.isEmpty {
                roots.append(node)
            } else {
                open[open.count - 1].children.append(node)
            }
        }

        func error(_ code: Int32) {
            if firstError == nil { firstError = (code, path(open)) }
        }

        private func stop() -> Int32 {
            if limit == nil { limit = XMLReadError(kind: .tooLarge, path: path(open)) }
            return 1
        }
    }
}
