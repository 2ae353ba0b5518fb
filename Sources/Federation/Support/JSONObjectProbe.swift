/// Decodes as any JSON object and reads none of it: decoding one checks a document is a JSON
/// object (the decoder parses the whole document first), where arrays, scalars and
/// malformed text are not.
struct JSONObjectProbe: Decodable {
    init(from decoder: any Decoder) throws {
        _ = try decoder.container(keyedBy: AnyKey.self)
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}
