import Federation
import SecureStorage
package import Synchronization
import XCTest

/// An error with a stable ``code`` to match on, for ``assertThrows(_:code:file:line:_:)``.
package protocol CodedError: Error {
    associatedtype Code: Equatable & CustomStringConvertible
    var code: Code { get }
}

extension FederationError: CodedError {}
extension KeystoreError: CodedError {}

/// Awaits `body`, expecting it to throw a `Failure` with `code` (any code when `nil`);
/// fails the test on success, on another error type, or on another code. Returns the
/// error for further checks.
@discardableResult
package func assertThrows<Failure: CodedError, T>(
    _ type: Failure.Type,
    code: Failure.Code? = nil,
    file: StaticString = #filePath,
    line: UInt = #line,
    _ body: () async throws -> T
) async -> Failure? {
    do {
        _ = try await body()
        thrownError(nil, as: type, code: code, file: file, line: line)
        return nil
    } catch {
        return thrownError(error, as: type, code: code, file: file, line: line)
    }
}

/// ``assertThrows(_:code:file:line:_:)`` for synchronous code.
@discardableResult
package func assertThrows<Failure: CodedError, T>(
    _ type: Failure.Type,
    code: Failure.Code? = nil,
    file: StaticString = #filePath,
    line: UInt = #line,
    _ body: () throws -> T
) -> Failure? {
    do {
        _ = try body()
        thrownError(nil, as: type, code: code, file: file, line: line)
        return nil
    } catch {
        return thrownError(error, as: type, code: code, file: file, line: line)
    }
}

/// Checks what `body` threw (`nil`: it returned) against the expectation.
@discardableResult
private func thrownError<Failure: CodedError>(
    _ error: (any Error)?, as type: Failure.Type, code: Failure.Code?, file: StaticString, line: UInt
) -> Failure? {
    let expected = "\(Failure.self)\(code.map { " with code \($0)" } ?? "")"
    guard let error else {
        XCTFail("expected \(expected), got success", file: file, line: line)
        return nil
    }
    guard let failure = error as? Failure else {
        XCTFail("expected \(expected), got \(Swift.type(of: error)): \(error)", file: file, line: line)
        return nil
    }
    if let code {
        XCTAssertEqual(failure.code, code, "\(failure)", file: file, line: line)
    }
    return failure
}

/// A `Mutex` in a class, so escaping and concurrent closures can share a value.
package final class LockedBox<Value: Sendable>: Sendable {
    package let value: Mutex<Value>

    package init(_ initial: Value) { value = Mutex(initial) }

    /// A copy of the value now.
    package var current: Value { value.withLock { $0 } }

    /// Changes the value under the lock; returns what `body` returns.
    @discardableResult
    package func withLock<Result: Sendable>(_ body: (inout Value) -> Result) -> Result {
        value.withLock { body(&$0) }
    }
}
