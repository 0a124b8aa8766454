// What every libFuzzer target shares (scripts/libfuzz compiles it into each): a property violation aborts, so
// libFuzzer keeps the input as a crash.
#if canImport(Glibc)
import Glibc
#endif

func violated(_ what: String) -> Never {
    fputs("property violated: \(what)\n", stderr)
    abort()
}
