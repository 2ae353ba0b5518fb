#if canImport(FoundationEssentials)
package import FoundationEssentials
#else
package import Foundation
#endif

/// Parses an HTTP-date (RFC 9110 section 5.6.7) without a calendar or locale.
///
/// Accepts the preferred IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) and the
/// two obsolete forms recipients must still read: RFC 850
/// (`Sunday, 06-Nov-94 08:49:37 GMT`, two-digit years 70–99 as 19xx, else 20xx)
/// and asctime (`Sun Nov  6 08:49:37 1994`). Weekday names are not checked.
package enum RetryAfterDate {
    package static func parse(_ text: some StringProtocol) -> Date? {
        let tokens = text.split(separator: " ", omittingEmptySubsequences: true)
        guard let first = tokens.first else { return nil }
        if first.hasSuffix(",") {
            if tokens.count == 6 {
                // IMF-fixdate: wkday, DD Mon YYYY hh:mm:ss GMT
                guard tokens[5] == "GMT", tokens[1].count == 2, tokens[3].count == 4,
                      let day = number(tokens[1]), let month = month(tokens[2]),
                      let year = number(tokens[3]), let time = time(tokens[4])
                else { return nil }
                return date(year: year, month: month, day: day, time: time)
            }
            if tokens.count == 4 {
                // RFC 850: weekday, DD-Mon-YY hh:mm:ss GMT
                let parts = tokens[1].split(separator: "-", omittingEmptySubsequences: false)
                guard tokens[3] == "GMT", parts.count == 3, parts[0].count == 2, parts[2].count == 2,
                      let day = number(parts[0]), let month = month(parts[1]),
                      let shortYear = number(parts[2]), let time = time(tokens[2])
                else { return nil }
                let year = shortYear >= 70 ? 1900 + shortYear : 2000 + shortYear
                return date(year: year, month: month, day: day, time: time)
            }
            return nil
        }
        // asctime: wkday Mon D hh:mm:ss YYYY (day padded with a space or not)
        guard tokens.count == 5, tokens[2].count <= 2, tokens[4].count == 4,
              let month = month(tokens[1]), let day = number(tokens[2]),
              let time = time(tokens[3]), let year = number(tokens[4])
        else { return nil }
        return date(year: year, month: month, day: day, time: time)
    }

    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    private static func month(_ text: some StringProtocol) -> Int? {
        months.firstIndex(of: text.lowercased()).map { $0 + 1 }
    }

    private static func number(_ text: some StringProtocol) -> Int? {
        guard !text.isEmpty, text.count <= 4 else { return nil }
        var value = 0
        for byte in text.utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    private static func time(_ text: some StringProtocol) -> (hour: Int, minute: Int, second: Int)? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ $0.count == 2 }),
              let hour = number(parts[0]), let minute = number(parts[1]), let second = number(parts[2]),
              hour < 24, minute < 60, second <= 60
        else { return nil }
        return (hour, minute, second)
    }

    private static func date(year: Int, month: Int, day: Int, time: (hour: Int, minute: Int, second: Int)) -> Date? {
        guard day >= 1, day <= CivilCalendar.daysInMonth(year: year, month: month) else { return nil }
        let days = CivilCalendar.days(year: year, month: month, day: day)
        let seconds = days * 86_400 + time.hour * 3_600 + time.minute * 60 + time.second
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }
}
