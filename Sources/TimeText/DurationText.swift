/// A duration as people write it in authctl's options and the configuration file: `90s`, `15m`, `1h`, `2d`, or a
/// bare number of seconds. One reader for `authctl audit --since` and the config's `sign_in_lifetime` and
/// `sign_in_warning`, so both accept the same spellings and neither can overflow.
public enum DurationText {
    /// The seconds `text` says; nil if malformed, negative or beyond what `Int` holds (with room to add to a time).
    public static func seconds(_ text: String) -> Int? {
        guard let last = text.last else { return nil }
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        let (digits, unit) = units[last].map { (text.dropLast(), $0) } ?? (Substring(text), 1)
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), let value = Int(digits), value >= 0,
              value <= Int.max / unit / 2 else { return nil }
        return value * unit
    }
}
