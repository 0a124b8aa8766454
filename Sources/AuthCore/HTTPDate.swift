import Glibc
import FoundationEssentials

/// The HTTP `Date` header (RFC 9110 §5.6.7, IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`), parsed without a locale
/// or a formatter (the C library's `timegm`). The obsolete RFC 850 and asctime forms are not accepted: every server
/// in use sends IMF-fixdate.
public enum HTTPDate {
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    public static func parse(_ text: String) -> Date? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[0].hasSuffix(","), parts[5] == "GMT",
              let day = Int(parts[1]), (1...31).contains(day),
              let month = months.firstIndex(of: String(parts[2])),
              let year = Int(parts[3]), (1970...9999).contains(year) else { return nil }
        let clock = parts[4].split(separator: ":")
        guard clock.count == 3, let hour = Int(clock[0]), let minute = Int(clock[1]), let second = Int(clock[2]),
              (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second) else { return nil }
        var date = tm(tm_sec: Int32(second), tm_min: Int32(minute), tm_hour: Int32(hour), tm_mday: Int32(day),
                      tm_mon: Int32(month), tm_year: Int32(year - 1900), tm_wday: 0, tm_yday: 0, tm_isdst: 0,
                      tm_gmtoff: 0, tm_zone: nil)
        return Date(timeIntervalSince1970: Double(timegm(&date)))
    }
}
