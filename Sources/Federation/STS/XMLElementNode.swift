import SecureStorage
/// One element of a small XML document (an STS response): its local name, its own
/// character data and its child elements. Attributes and namespaces are not kept;
/// AWS's Query responses carry everything in element text.
struct XMLElementNode: Sendable, Hashable {
    /// The local name (any `prefix:` removed).
    var name: String
    /// The element's own character data, entities decoded.
    var text: String
    /// Child elements in document order.
    var children: [XMLElementNode]

    init(name: String, text: String = "", children: [XMLElementNode] = []) {
        self.name = name
        self.text = text
        self.children = children
    }

    /// The first child named `name`.
    func child(_ name: String) -> XMLElementNode? {
        children.first { $0.name == name }
    }

    /// The text with surrounding white space removed.
    var trimmedText: String {
        String(text.trimmingWhitespace)
    }
}

/// Why an XML body could not be read; names an element path, never a value.
struct XMLReadError: Error, Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        /// Nothing but white space.
        case empty
        /// Not well-formed XML.
        case malformed
        /// The body ends inside an element.
        case truncated
        /// A `<!DOCTYPE` or `<!ENTITY` declaration (AWS never sends one; refused to rule out entity tricks).
        case documentTypeDeclaration
        /// Deeper, larger or longer than a response can be.
        case tooLarge
        /// libxml2 could not be loaded; the reason names the library, never the body.
        case parserUnavailable(String)
    }

    var kind: Kind
    /// The open elements where it happened, e.g. `ErrorResponse/Error`; empty at the top level.
    var path: String

    /// A phrase for an error message: "truncated XML inside 'A/B'".
    var summary: String {
        let location = path.isEmpty ? "" : " inside '\(path)'"
        switch kind {
        case .empty: return "an empty body"
        case .malformed: return "malformed XML\(path.isEmpty ? "" : " at '\(path)'")"
        case .truncated: return "truncated XML\(location)"
        case .documentTypeDeclaration: return "XML with a document type declaration"
        case .tooLarge: return "XML nested too deep or with too many elements\(location)"
        case .parserUnavailable(let reason): return "XML that cannot be read here: \(reason)"
        }
    }
}
