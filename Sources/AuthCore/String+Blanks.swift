/// Trimming without Foundation's `CharacterSet` (the agent links FoundationEssentials only: docs/BENCHMARKS.md,
/// "Installed size"). The same characters as Foundation's sets, by Unicode property.
extension StringProtocol {
    /// Without leading and trailing spaces and tabs (Unicode `Zs` and U+0009: `CharacterSet.whitespaces`).
    public var trimmingBlanks: String {
        trimming { $0 == "\t" || $0.properties.generalCategory == .spaceSeparator }
    }

    /// Without leading and trailing spaces, tabs and line breaks (Unicode `White_Space`:
    /// `CharacterSet.whitespacesAndNewlines`).
    public var trimmingWhitespace: String {
        trimming { $0.properties.isWhitespace }
    }

    private func trimming(_ isTrimmed: (Unicode.Scalar) -> Bool) -> String {
        let scalars = Substring(self).unicodeScalars
        guard let start = scalars.firstIndex(where: { !isTrimmed($0) }),
              let end = scalars.lastIndex(where: { !isTrimmed($0) }) else { return "" }
        return String(scalars[start...end])
    }
}
