import Foundation
import FoundationXML

/// Reads a small XML body into an ``XMLElementNode`` tree with Foundation's `XMLParser`
/// (libxml2). The only file of the library that imports FoundationXML (and so full
/// Foundation): the classic flow's STS responses are XML.
///
/// Bounded: the transport already caps the body; here depth, element count and text per
/// element are capped too, and a document type declaration is refused before parsing, so
/// no entity can expand. External entities are never resolved.
enum XMLTreeReader {
    static let maxDepth = 16
    static let maxElements = 1_024
    static let maxTextBytes = 64 * 1_024
    /// libxml2's error codes for input that stops early.
    static let endOfDataCodes: Set<Int> = [5, 73, 77]

    /// The document's root element.
    static func read(_ body: [UInt8]) throws(XMLReadError) -> XMLElementNode {
        guard body.contains(where: { !($0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D) }) else {
            throw XMLReadError(kind: .empty, path: "")
        }
        if containsDeclaration(body) {
            throw XMLReadError(kind: .documentTypeDeclaration, path: "")
        }
        let collector = TreeCollector()
        let parser = XMLParser(data: Data(body))
        parser.shouldResolveExternalEntities = false
        parser.shouldProcessNamespaces = false
        parser.delegate = collector
        let finished = parser.parse()
        if let limit = collector.limit { throw limit }
        // XMLParser reports a body that ends early as a success with an error set, and
        // recovers from some errors, so the first error decides: one that means "the data
        // ended" (libxml2's XML_ERR_DOCUMENT_END 5, XML_ERR_GT_REQUIRED 73,
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
        if !finished || parser.parserError != nil || collector.roots.count != 1 {
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

    /// Builds the tree as the parser reports elements. Used on one thread, during `parse()`.
    private final class TreeCollector: NSObject, XMLParserDelegate {
        var open: [XMLElementNode] = []
        var roots: [XMLElementNode] = []
        var elements = 0
        var limit: XMLReadError?
        var firstError: (code: Int, path: String)?

        func path(_ nodes: [XMLElementNode]) -> String {
            nodes.map { String($0.name.prefix(64)) }.joined(separator: "/")
        }

        func parser(
            _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
            qualifiedName qName: String?, attributes attributeDict: [String: String] = [:]
        ) {
            elements += 1
            guard open.count < XMLTreeReader.maxDepth, elements <= XMLTreeReader.maxElements else {
                stop(parser)
                return
            }
            let local = elementName.split(separator: ":").last.map(String.init) ?? elementName
            open.append(XMLElementNode(name: local))
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard !open.isEmpty else { return }
            guard open[open.count - 1].text.utf8.count + string.utf8.count <= XMLTreeReader.maxTextBytes else {
                stop(parser)
                return
            }
            open[open.count - 1].text += string
        }

        func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
            self.parser(parser, foundCharacters: String(decoding: CDATABlock, as: UTF8.self))
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?) {
            guard let node = open.popLast() else { return }
            if open.isEmpty {
                roots.append(node)
            } else {
                open[open.count - 1].children.append(node)
            }
        }

        func parser(_ parser: XMLParser, parseErrorOccurred parseError: any Error) {
            if firstError == nil { firstError = ((parseError as NSError).code, path(open)) }
        }

        private func stop(_ parser: XMLParser) {
            if limit == nil { limit = XMLReadError(kind: .tooLarge, path: path(open)) }
            parser.abortParsing()
        }
    }
}
