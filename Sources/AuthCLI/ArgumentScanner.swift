/// A deliberately narrow command-line scanner for authctl's hot verbs (`token`, `git-credential`), so they can run
/// without building ArgumentParser's command tree (reflection and conformance scans cost more than the request).
///
/// It accepts only what it is sure ArgumentParser reads the same way: known `--long` flags (each at most once, no
/// `=value`), known `--long VALUE` / `--long=VALUE` options with a non-empty value that does not start with `-`,
/// and at most one positional that is non-empty, does not start with `-` and is not `help`. Anything else (`--`,
/// short options, `--help`, unknown names, repeated flags, odd values) makes ``scan(_:)`` return nil, and the caller
/// hands the untouched arguments to ArgumentParser, which then produces its own output, errors and exit codes.
public struct ArgumentScanner: Sendable {
    /// What a scan found: flags set, option values in order of appearance, and the positional, if any.
    public struct Scan: Sendable {
        public var flags: [String] = []
        /// (option name, value) in order of appearance; a list, not a Dictionary, for the same reason as above.
        public var options: [(name: String, value: String)] = []
        public var positional: String?

        /// The one value of a single-valued option (the scanner refused repeats of those).
        public func value(_ name: String) -> String? { options.first { $0.name == name }?.value }

        /// A count option's value: `.some(nil)` when absent, nil when present but not a plain non-negative decimal
        /// (``ArgumentScanner/count(_:)``: the caller then leaves the line to ArgumentParser).
        public func count(_ name: String) -> Int?? {
            guard let text = value(name) else { return .some(nil) }
            guard let count = ArgumentScanner.count(text) else { return nil }
            return count
        }

        /// Every value of a repeatable option, in order.
        public func values(_ name: String) -> [String] { options.filter { $0.name == name }.map(\.value) }
    }

    // Arrays, not Sets: a handful of names, and Set<String>'s generic metadata costs a conformance scan at start-up.
    let flags: [String]
    let options: [String]
    let repeatable: [String]

    /// - Parameters:
    ///   - flags: long names (without `--`) of Boolean flags.
    ///   - options: long names of options that take one value and may appear once.
    ///   - repeatable: long names of options that take one value and may appear many times (arrays).
    public init(flags: [String], options: [String], repeatable: [String] = []) {
        self.flags = flags
        self.options = options
        self.repeatable = repeatable
    }

    /// Scans the arguments after the verb; nil means "not certain: let ArgumentParser decide".
    public func scan(_ arguments: [String]) -> Scan? {
        var scan = Scan()
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            guard argument.hasPrefix("-") else {
                guard scan.positional == nil, !argument.isEmpty, argument != "help" else { return nil }
                scan.positional = argument
                continue
            }
            guard argument.hasPrefix("--"), argument.count > 2 else { return nil }
            let body = argument.dropFirst(2)
            let name: String
            var value: String?
            if let equals = body.firstIndex(of: "=") {
                name = String(body[..<equals])
                value = String(body[body.index(after: equals)...])
            } else {
                name = String(body)
            }
            if flags.contains(name) {
                guard value == nil, !scan.flags.contains(name) else { return nil }
                scan.flags.append(name)
                continue
            }
            guard options.contains(name) || repeatable.contains(name) else { return nil }
            guard repeatable.contains(name) || scan.value(name) == nil else { return nil }
            if value == nil { value = iterator.next() }
            guard let value, !value.isEmpty, !value.hasPrefix("-") else { return nil }
            scan.options.append((name, value))
        }
        return scan
    }

    /// A non-negative decimal count as ArgumentParser's `Int` parsing reads it, or nil for anything else
    /// (signs, spaces, other bases, overflow), which the caller then leaves to ArgumentParser.
    public static func count(_ text: String) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return Int(text)
    }
}
