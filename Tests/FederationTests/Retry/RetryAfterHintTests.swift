#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Federation
import XCTest

final class RetryAfterHintTests: XCTestCase {
    /// Sun, 06 Nov 1994 08:49:37 GMT, the example date of RFC 9110.
    private let now = Date(timeIntervalSince1970: 784_111_777)

    private func hint(_ headers: [(name: String, value: String)]) -> Duration? {
        RetryRunner.retryAfterHint(headers: headers, now: now)
    }

    func testAmzRetryAfterIsMilliseconds() {
        XCTAssertEqual(hint([(name: "x-amz-retry-after", value: "1500")]), .milliseconds(1_500))
        XCTAssertEqual(hint([(name: "x-amz-retry-after", value: "0")]), .zero)
    }

    func testRetryAfterSeconds() {
        XCTAssertEqual(hint([(name: "retry-after", value: "7")]), .seconds(7))
        XCTAssertEqual(hint([(name: "Retry-After", value: " 120 ")]), .seconds(120))
        // A header given twice: its first field counts.
        XCTAssertEqual(hint([(name: "Retry-After", value: "3"), (name: "retry-after", value: "9")]), .seconds(3))
        XCTAssertEqual(hint([(name: "x-amz-retry-after", value: "40"), (name: "X-Amz-Retry-After", value: "900")]), .milliseconds(40))
    }

    func testRetryAfterIMFFixdate() {
        XCTAssertEqual(hint([(name: "Retry-After", value: "Sun, 06 Nov 1994 08:49:47 GMT")]), .seconds(10))
        XCTAssertEqual(hint([(name: "Retry-After", value: "Mon, 07 Nov 1994 08:49:37 GMT")]), .seconds(86_400))
    }

    func testRetryAfterObsoleteDateForms() {
        XCTAssertEqual(hint([(name: "Retry-After", value: "Sunday, 06-Nov-94 08:50:07 GMT")]), .seconds(30))
        XCTAssertEqual(hint([(name: "Retry-After", value: "Sun Nov  6 08:49:42 1994")]), .seconds(5))
    }

    func testDateInThePastGivesZero() {
        XCTAssertEqual(hint([(name: "Retry-After", value: "Sun, 06 Nov 1994 08:00:00 GMT")]), .zero)
        XCTAssertEqual(hint([(name: "Retry-After", value: "Thu, 01 Jan 1970 00:00:00 GMT")]), .zero)
    }

    func testDateArithmeticAcrossLeapYearsAndCenturies() {
        let epoch = Date(timeIntervalSince1970: 0)
        func at(_ value: String) -> Duration? {
            RetryRunner.retryAfterHint(headers: [(name: "Retry-After", value: value)], now: epoch)
        }
        XCTAssertEqual(at("Thu, 01 Jan 1970 00:00:01 GMT"), .seconds(1))
        XCTAssertEqual(at("Tue, 29 Feb 2000 00:00:00 GMT"), .seconds(951_782_400))
        XCTAssertEqual(at("Sun, 09 Sep 2001 01:46:40 GMT"), .seconds(1_000_000_000))
        XCTAssertEqual(at("Thu, 01 Jan 2099 00:00:00 GMT"), .seconds(4_070_908_800))
        // 2100 is not a leap year (a century not divisible by 400), 2000 was.
        XCTAssertNil(at("Mon, 29 Feb 2100 00:00:00 GMT"))
        XCTAssertEqual(at("Mon, 01 Mar 2100 00:00:00 GMT"), .seconds(4_107_542_400))
        // RFC 850's two-digit years: 70–99 are 19xx, the rest 20xx.
        XCTAssertEqual(at("Thursday, 01-Jan-26 00:00:00 GMT"), .seconds(1_767_225_600))
        XCTAssertEqual(at("Tuesday, 01-Jan-69 00:00:00 GMT"), .seconds(3_124_224_000))
        XCTAssertEqual(at("Thursday, 01-Jan-70 00:00:01 GMT"), .seconds(1))
    }

    func testAmzRetryAfterTakesPrecedence() {
        let headers = [(name: "Retry-After", value: "9"), (name: "x-amz-retry-after", value: "250")]
        XCTAssertEqual(hint(headers), .milliseconds(250))
    }

    func testMalformedAmzRetryAfterFallsBackToRetryAfter() {
        let headers = [(name: "x-amz-retry-after", value: "soon"), (name: "retry-after", value: "3")]
        XCTAssertEqual(hint(headers), .seconds(3))
    }

    func testHeaderNamesAreCaseInsensitive() {
        XCTAssertEqual(hint([(name: "X-Amz-Retry-After", value: "10")]), .milliseconds(10))
        XCTAssertEqual(hint([(name: "RETRY-AFTER", value: "2")]), .seconds(2))
    }

    func testInvalidValuesGiveNoHint() {
        for value in ["", "   ", "-1", "1.5", "+3", "0x10", "soon", "3 seconds",
                      "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:00:00 GMT",
                      "Sun, 06 Nov 1994 08:49:37 PST", "Sun, 06 Foo 1994 08:49:37 GMT",
                      "Sun, 6 Nov 1994 08:49:37 GMT", "Sun Nov 6 08:49:37", "Sun, 06-Nov-1994 08:49:37 GMT"] {
            XCTAssertNil(hint([(name: "Retry-After", value: value)]), "Retry-After: \(value)")
        }
        XCTAssertNil(hint([(name: "x-amz-retry-after", value: "1.5")]))
        XCTAssertNil(hint([]))
        XCTAssertNil(hint([(name: "content-type", value: "application/json")]))
    }

    func testHugeValuesAreClampedNotOverflowed() throws {
        let huge = try XCTUnwrap(hint([(name: "Retry-After", value: String(repeating: "9", count: 60))]))
        XCTAssertGreaterThan(huge, .seconds(1_000_000))
        XCTAssertEqual(RetryHarness().runner().delay(afterAttempt: 1, hint: huge), .seconds(20))
        let hugeMs = try XCTUnwrap(hint([(name: "x-amz-retry-after", value: String(repeating: "9", count: 60))]))
        XCTAssertGreaterThan(hugeMs, .seconds(1_000))
    }
}
