import Glibc

/// A moment as the user's clock shows it ("2026-05-24 17:03 CEST": the session's `TZ`, else /etc/localtime), the same
/// in `authctl status` and the agent's notifications. strftime, not Foundation's date formatting, which needs ICU
/// (neither binary links it: docs/BENCHMARKS.md, "Installed size").
public enum LocalTime {
    /// `seconds` since the epoch; "@SECONDS" if the C library cannot convert it.
    public static func text(_ seconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        guard localtime_r(&time, &parts) != nil else { return "@\(seconds)" }
        var buffer = [CChar](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M %Z", &parts)
        return count > 0 ? String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "@\(seconds)"
    }
}
