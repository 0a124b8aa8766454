import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// A small mutation fuzzer for code that parses hostile bytes (issue 7, "Fuzzing"). It is not libFuzzer: there is
/// no coverage feedback (building the whole dependency graph with `-sanitize=fuzzer` would double CI's build time),
/// but every target checks real properties of its output on every input, not only "did not crash".
///
/// Inputs: the committed seed corpus `Tests/Fuzz/corpus/<target>/`, then mutations of seeds and of recent inputs
/// (bit flips, interesting bytes, dictionary tokens, deletions, duplications, splices, huge numbers) until the time
/// budget runs out. Environment: `FUZZ_SECONDS` per target (default 2), `FUZZ_SEED` (default random; printed so a
/// failure can be replayed). A crash (a Swift trap or a signal) writes the input that caused it to
/// `.build/fuzz-crash-<target>` before the process dies; a property failure writes `.build/fuzz-failure-<target>`.
struct FuzzEngine {
    struct Report {
        var inputs = 0
        var failures = 0
        var seconds = 0.0
    }

    let target: String
    let seeds: [[UInt8]]
    let dictionary: [[UInt8]]
    let maxLength: Int

    static let repoRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    init(target: String, dictionary: [String], maxLength: Int = 4096) {
        self.target = target
        self.dictionary = dictionary.map { Array($0.utf8) } + FuzzEngine.commonTokens
        self.maxLength = maxLength
        let directory = FuzzEngine.repoRoot.appendingPathComponent("Tests/Fuzz/corpus/\(target)")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path))?.sorted() ?? []
        self.seeds = names.compactMap { FileManager.default.contents(atPath: directory.appendingPathComponent($0).path) }
            .map { Array($0) }
    }

    static let commonTokens: [[UInt8]] = [
        [0x00], [0xFF], [0x0A], [0x0D, 0x0A], [0x0D], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
        [0xFF, 0xFF, 0xFF, 0xFF],
    ] + ["\"", "\\", "\\u0000", "\\ud800", "{", "}", "[", "]", ":", ",", "%", "%00", "%ZZ", "%0A", "&", "=", "?", "#",
         " ", "+", "99999999999999999999999", "-1", "1e308", "null", "true", "[[[[[[[[", "\u{202E}", "é"]
        .map { Array($0.utf8) }

    static var seconds: Double { Double(ProcessInfo.processInfo.environment["FUZZ_SECONDS"] ?? "") ?? 2 }

    /// Runs `body` on each seed, then on mutations until the time budget is spent. `body` returns nil when the
    /// input is fine, or a description of the property it broke.
    func run(_ body: ([UInt8]) -> String?) -> Report {
        XCTAssertFalse(seeds.isEmpty, "no seed corpus in Tests/Fuzz/corpus/\(target)")
        let seed = UInt64(ProcessInfo.processInfo.environment["FUZZ_SEED"] ?? "") ?? UInt64.random(in: 1...UInt64.max)
        var rng = SplitMix64(seed: seed)
        CrashCapture.install(target: target, capacity: maxLength)
        defer { CrashCapture.uninstall() }
        var report = Report()
        var recent: [[UInt8]] = []
        let start = ContinuousClock.now
        let budget = Duration.milliseconds(Int(FuzzEngine.seconds * 1000))
        var queue = seeds
        while true {
            let input: [UInt8]
            if !queue.isEmpty {
                input = queue.removeFirst()
            } else {
                if report.inputs % 256 == 0, ContinuousClock.now - start > budget { break }
                let base = (!recent.isEmpty && rng.next(4) == 0) ? recent[rng.next(recent.count)] : seeds[rng.next(seeds.count)]
                input = mutate(base, &rng)
                if recent.count < 64 { recent.append(input) } else { recent[rng.next(64)] = input }
            }
            CrashCapture.remember(input)
            report.inputs += 1
            if let failure = body(input) {
                report.failures += 1
                let path = FuzzEngine.repoRoot.appendingPathComponent(".build/fuzz-failure-\(target)").path
                FileManager.default.createFile(atPath: path, contents: Data(input))
                XCTFail("fuzz \(target) (seed \(seed)): \(failure); input saved to \(path): \(Data(input).base64EncodedString().prefix(400))")
                break
            }
        }
        let elapsed = (ContinuousClock.now - start).components
        report.seconds = Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
        print("fuzz \(target): \(report.inputs) inputs in \(String(format: "%.1f", report.seconds)) s (seed \(seed), "
              + "\(seeds.count) seeds), \(report.failures) property failures, 0 crashes")
        return report
    }

    func mutate(_ base: [UInt8], _ rng: inout SplitMix64) -> [UInt8] {
        var data = base
        for _ in 0...rng.next(6) {
            let position = data.isEmpty ? 0 : rng.next(data.count + 1)
            switch rng.next(10) {
            case 0 where !data.isEmpty:  // flip a bit
                let i = rng.next(data.count)
                data[i] ^= UInt8(1 << rng.next(8))
            case 1 where !data.isEmpty:  // an interesting byte
                data[rng.next(data.count)] = [0x00, 0x0A, 0x0D, 0x22, 0x25, 0x26, 0x3D, 0x3F, 0x5C, 0x7F, 0x80, 0xC0, 0xFF][rng.next(13)]
            case 2, 3:  // insert a dictionary token
                data.insert(contentsOf: dictionary[rng.next(dictionary.count)], at: position)
            case 4 where !data.isEmpty:  // replace a range with a token
                let end = min(data.count, position + rng.next(16))
                data.replaceSubrange(min(position, end)..<end, with: dictionary[rng.next(dictionary.count)])
            case 5 where !data.isEmpty:  // delete a range
                let end = min(data.count, position + 1 + rng.next(32))
                data.removeSubrange(min(position, data.count)..<end)
            case 6 where !data.isEmpty:  // duplicate a range, sometimes many times
                let from = rng.next(data.count)
                let piece = Array(data[from..<min(data.count, from + 1 + rng.next(64))])
                for _ in 0..<(rng.next(4) == 0 ? rng.next(200) : 1) { data.insert(contentsOf: piece, at: min(position, data.count)) }
            case 7:  // splice with another seed
                let other = seeds[rng.next(seeds.count)]
                let cut = other.isEmpty ? 0 : rng.next(other.count)
                data = Array(data[..<min(position, data.count)]) + other[cut...]
            case 8 where !data.isEmpty:  // truncate
                data.removeSubrange(rng.next(data.count)...)
            default:  // random bytes
                data.insert(contentsOf: (0..<(1 + rng.next(8))).map { _ in UInt8(rng.next(256)) }, at: position)
            }
        }
        return data.count > maxLength ? Array(data.prefix(maxLength)) : data
    }
}

/// A fast deterministic generator, so `FUZZ_SEED` replays a run exactly.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func nextUInt64() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func next(_ bound: Int) -> Int { Int(nextUInt64() % UInt64(max(bound, 1))) }
}

/// Keeps the current input where a signal handler can write it out: a trap in the code under test kills the test
/// process, and this leaves the input that did it in `.build/fuzz-crash-<target>`.
enum CrashCapture {
    nonisolated(unsafe) static var buffer = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: 0)
    nonisolated(unsafe) static var count = 0
    nonisolated(unsafe) static var path = UnsafeMutableBufferPointer<CChar>.allocate(capacity: 0)
    static let signals: [Int32] = [SIGILL, SIGTRAP, SIGSEGV, SIGBUS, SIGABRT, SIGFPE]

    static func install(target: String, capacity: Int) {
        buffer = .allocate(capacity: capacity)
        let text = Array(FuzzEngine.repoRoot.appendingPathComponent(".build/fuzz-crash-\(target)").path.utf8CString)
        path = .allocate(capacity: text.count)
        _ = path.initialize(from: text)
        for sig in signals {
            signal(sig) { sig in
                let fd = open(CrashCapture.path.baseAddress!, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
                if fd >= 0 {
                    _ = write(fd, CrashCapture.buffer.baseAddress, CrashCapture.count)
                    close(fd)
                }
                signal(sig, SIG_DFL)
                raise(sig)
            }
        }
    }

    static func remember(_ input: [UInt8]) {
        count = min(input.count, buffer.count)
        input.withUnsafeBufferPointer { source in
            if count > 0 { buffer.baseAddress!.update(from: source.baseAddress!, count: count) }
        }
    }

    static func uninstall() {
        for sig in signals { signal(sig, SIG_DFL) }
    }
}
