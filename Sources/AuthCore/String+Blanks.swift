/// Trimming without Foundation's `CharacterSet` (the agent links FoundationEssentials only: docs/BENCHMARKS.md,
/// "Installed size"). The same characters as Foundation's sets (checked against them for every scalar): by Unicode
/// property, plus U+200B ZERO WIDTH SPACE, which Foundation still counts as a space.
extension StringProtocol {
    /// Without leading and trailing spaces and tabs (Unicode `Zs`, U+0009 and U+200B: `CharacterSet.whitespaces`).
    public var trimmingBlanks: String {
        trimming { $0 == "\t" || $0 == "\u{200B}" || $0.properties.generalCategory == .spaceSeparator }
    }

    /// Without leading and trailing spaces, tabs and line breaks (Unicode `White_Space` and U+200B:
    /// `CharacterSet.whitespacesAndNewlines`).
    public var trimmingWhitespace: String {
        trimming { $0 == "\u{200B}" || $0.properties.isWhitespace }
    }

    private func trimming(_ isTrimmed: (Unicode.Scalar) -> Bool) -> String {
        let scalars = Substring(self).unicodeScalars
        guard let start = scalars.firstIndex(where: { !isTrimmed($0) }),
              let end = scalars.lastIndex(where: { !isTrimmed($0) }) else { return "" }
        return String(scalars[start...end])
    }
}
