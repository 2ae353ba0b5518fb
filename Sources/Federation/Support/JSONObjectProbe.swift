/// Decodes as any JSON object and reads none of it: a document that decodes is an object,
/// delimited as one, with nothing after it (arrays, scalars and text that is not JSON
/// fail). What its values hold (number syntax, escapes) is not read, so not checked.
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
