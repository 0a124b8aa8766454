import Glibc

/// RFC 3339 timestamps in UTC (`2026-01-02T03:04:05Z`), the form Kubernetes' `metav1.Time` expects, with the C
/// library's `gmtime_r`, so authctl needs no Foundation date formatting. An instant outside the years 1000-9999 (four
/// digits, as RFC 3339 writes them) is clamped to that range's first or last second.
public enum RFC3339 {
    public static func utc(unixSeconds: Int) -> String {
        var time = time_t(min(max(unixSeconds, -30_610_224_000), 253_402_300_799))
        var parts = tm()
        _ = gmtime_r(&time, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%SZ", &parts)
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
