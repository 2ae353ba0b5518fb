import CLibCrypto
import CCurlLoader

/// The one process-wide initialisation of the C libraries the broker uses.
///
/// Order matters: OpenSSL is initialised first **without** its atexit handler, and only
/// then libcurl. libcurl and the keystore share one OpenSSL; if `curl_global_init`
/// initialised it first, OpenSSL would register its atexit cleanup, which races Swift's
/// own teardown at process exit (a known double-free in swift-corelibs-foundation).
///
/// `curl_global_init` is not thread-safe and must run once before any other libcurl
/// call, so the work sits behind a `static let`, whose initialiser Swift runs exactly
/// once (`swift_once`) however many threads race to it. The curl driver calls ``ensure()``
/// before its first libcurl call (every request goes through it); it is cheap after the
/// first call. Code that only seals or opens items initialises OpenSSL through
/// SecureStorage's `CryptoRuntime`, the same way and just as once.
package enum LibraryBootstrap {
    /// The result of the one initialisation, computed on first use.
    private static let outcome: Outcome = {
        let cryptoOK = ib_crypto_init_no_atexit() == 1
        guard let loadError = loadCurl() else {
            let curlCode = ib_curl_global_init(Int(CURL_GLOBAL_DEFAULT))
            return Outcome(cryptoInitialised: cryptoOK, curlCode: Int32(bitPattern: curlCode.rawValue), curlLoadError: nil)
        }
        return Outcome(cryptoInitialised: cryptoOK, curlCode: 0, curlLoadError: loadError)
    }()

    /// Runs the process-wide initialisation if it has not run yet.
    ///
    /// Both libraries only fail to initialise when memory is exhausted, in which case
    /// nothing the broker could do afterwards would be sound; hence the precondition
    /// instead of a thrown error every caller would have to handle. libcurl missing from
    /// the machine (it is loaded on first use, not linked) is an error to report, though.
    ///
    /// - Returns: why libcurl cannot be used, or `nil` when it can.
    package static func ensure() -> String? {
        let outcome = outcome
        precondition(outcome.cryptoInitialised, "OPENSSL_init_crypto failed")
        if let error = outcome.curlLoadError { return error }
        precondition(outcome.curlCode == 0, "curl_global_init failed with CURLcode \(outcome.curlCode)")
        return nil
    }

    /// Loads libcurl (once) without initialising it, for its URL parser; returns why it
    /// cannot be loaded, or `nil`.
    package static func loadCurl() -> String? {
        ib_curl_load() == 1 ? nil : String(cString: ib_curl_load_error())
    }

    private struct Outcome: Sendable {
        var cryptoInitialised: Bool
        var curlCode: Int32
        var curlLoadError: String?
    }
}
