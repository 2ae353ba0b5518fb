/// Comparisons whose running time does not depend on where two secrets differ.
enum ConstantTime {
    /// Whether `presented` equals `expected`, looking at every byte of `expected` whatever
    /// the content: the time depends only on the lengths (the expected token's length is
    /// public: always 64 characters), never on the position of the first difference.
    ///
    /// Generic over `expected` so that a test can count what it reads; the server passes an
    /// array.
    @inline(never)
    static func equals<Expected: RandomAccessCollection<UInt8>>(_ presented: [UInt8], _ expected: Expected) -> Bool
    where Expected.Index == Int {
        var difference = UInt8(truncatingIfNeeded: presented.count ^ expected.count)
        for offset in 0..<expected.count {
            let expectedByte = expected[expected.startIndex + offset]
            // Past the end of a shorter `presented`, a byte that always differs: the loop
            // still runs over all of `expected`.
            let byte = offset < presented.count ? presented[offset] : expectedByte ^ 0xFF
            difference |= byte ^ expectedByte
        }
        return difference == 0 && presented.count == expected.count
    }
}
