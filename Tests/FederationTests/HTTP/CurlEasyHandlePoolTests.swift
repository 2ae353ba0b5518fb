import Federation
import XCTest

/// The driver loop's idle easy handles (``CurlEasyHandlePool``): a handle given back is the
/// next one taken, and the pool never keeps more than its capacity. That a reused handle
/// carries nothing of its last request is checked on the wire, in
/// `CurlTransportTests.testAReusedHandleCarriesNothingOfTheRequestBefore`.
final class CurlEasyHandlePoolTests: XCTestCase {
    override func setUp() {
        super.setUp()
        XCTAssertNil(LibraryBootstrap.ensure(), "libcurl must load for these tests")
    }

    func testAHandleGivenBackIsTheNextOneTaken() throws {
        let pool = CurlEasyHandlePool(capacity: 4)
        let first = try XCTUnwrap(pool.take())
        let second = try XCTUnwrap(pool.take())
        XCTAssertNotEqual(first, second)
        XCTAssertEqual(pool.idleCount, 0)

        pool.recycle(first)
        XCTAssertEqual(pool.idleCount, 1)
        XCTAssertEqual(pool.take(), first, "the idle handle is reused rather than a new one made")
        XCTAssertEqual(pool.idleCount, 0)
        pool.recycle(first)
        pool.recycle(second)
    }

    func testThePoolKeepsAtMostItsCapacity() throws {
        let pool = CurlEasyHandlePool(capacity: 2)
        let handles = try (0..<5).map { _ in try XCTUnwrap(pool.take()) }
        for handle in handles { pool.recycle(handle) }
        XCTAssertEqual(pool.idleCount, 2, "handles past the capacity are freed, not kept")
        let again = try (0..<2).map { _ in try XCTUnwrap(pool.take()) }
        XCTAssertEqual(Set(again), Set(handles.prefix(2)), "the kept ones are the first given back")
        for handle in again { pool.recycle(handle) }
    }

    func testAPoolOfCapacityZeroKeepsNothing() throws {
        let pool = CurlEasyHandlePool(capacity: 0)
        let handle = try XCTUnwrap(pool.take())
        pool.recycle(handle)
        XCTAssertEqual(pool.idleCount, 0)
    }
}
