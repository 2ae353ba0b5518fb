@testable import CredentialServer
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import XCTest

/// Which connection the roster closes to make room, on channels without sockets: never one
/// with a request in progress, and closed connections leave it.
final class ConnectionRosterTests: XCTestCase {
    private func open(_ roster: ConnectionRoster) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel(handler: roster.handler())
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    private func request(_ channel: EmbeddedChannel) throws {
        try channel.writeInbound(ByteBuffer(string: "GET"))
    }

    private func answer(_ channel: EmbeddedChannel) throws {
        try channel.writeOutbound(HTTPResponsePart.end(nil))
    }

    func testTheConnectionIdleLongestWithoutARequestMakesRoom() throws {
        let roster = ConnectionRoster(limit: 3, logger: Logger(label: "test"))
        let first = try open(roster)
        let second = try open(roster)
        let third = try open(roster)
        // The oldest has a request in progress: the next oldest goes.
        try request(first)
        let fourth = try open(roster)
        XCTAssertTrue(first.isActive, "a connection with a request in progress was closed")
        XCTAssertFalse(second.isActive)
        XCTAssertTrue(third.isActive)
        XCTAssertTrue(fourth.isActive)
        XCTAssertEqual(roster.recorded, [0: true, 2: false, 3: false])
        // Every other one busy: the new one goes.
        try request(third)
        try request(fourth)
        _ = try open(roster)
        XCTAssertEqual(roster.recorded, [0: true, 2: true, 3: true], "the new connection was not the one to go")
        XCTAssertTrue(first.isActive && third.isActive && fourth.isActive)
    }

    /// A kept-alive connection whose answer was written waits like a new one, and its next
    /// request is in progress again.
    func testAKeptAliveConnectionsNextRequestIsInProgressAgain() throws {
        let roster = ConnectionRoster(limit: 2, logger: Logger(label: "test"))
        let kept = try open(roster)
        try request(kept)
        try answer(kept)
        XCTAssertEqual(roster.recorded[0], false)
        try request(kept)
        XCTAssertEqual(roster.recorded[0], true)
        let other = try open(roster)
        let newest = try open(roster)
        XCTAssertTrue(kept.isActive, "the kept-alive connection's second request was closed")
        XCTAssertFalse(other.isActive)
        XCTAssertTrue(newest.isActive)
    }

    /// Closed connections leave the roster: they neither count against the limit nor get
    /// picked in place of an open one.
    func testClosedConnectionsLeaveTheRoster() throws {
        let roster = ConnectionRoster(limit: 2, logger: Logger(label: "test"))
        let gone = try open(roster)
        let kept = try open(roster)
        try gone.close().wait()
        gone.embeddedEventLoop.run()
        XCTAssertEqual(roster.recorded, [1: false])
        let next = try open(roster)
        XCTAssertTrue(kept.isActive, "a closed connection still counted against the limit")
        XCTAssertTrue(next.isActive)
        XCTAssertEqual(roster.recorded, [1: false, 2: false])
    }
}
