"""What the installed binaries are made of (scripts/bench, BENCH_ONLY=size).

For each binary: its size as built (with symbols) and as `make install` leaves it (stripped), the stripped file's
sections (`size -A`), and the bytes of its symbols (`nm -S` of the unstripped binary) by where each symbol was
defined: the build's object files (one directory per module), else the toolchain's static archives (Swift runtime,
Foundation, ICU), else the C libraries linked statically (glibc, libstdc++: authctl). ICU's data is one symbol,
`icudtNN_dat`, shown on its own row. What no symbol covers (Swift's metadata sections, unwind tables, relocations,
the dynamic symbol table, alignment) is the last row.

    binary_size.py BUILT_DIR INSTALLED_BIN_DIR STATIC_LIB_DIR [BINARY...]
"""
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

# Module (object directory `NAME.build`) or archive (`libNAME.a`) -> row. Order is the table's order.
GROUPS = [
    ("ICU data (icudt*_dat, full Foundation)", []),
    ("ICU code (_FoundationICU)", ["_FoundationICU"]),
    ("Foundation, CoreFoundation, FoundationInternationalization",
     ["Foundation", "CoreFoundation", "FoundationInternationalization", "FoundationNetworking", "_CFURLSessionInterface",
      "_CFXMLInterface", "FoundationXML"]),
    ("FoundationEssentials", ["FoundationEssentials", "_FoundationCollections", "_FoundationCShims"]),
    ("Swift runtime, stdlib, Concurrency, Dispatch",
     ["swiftCore", "swift_Concurrency", "swift_StringProcessing", "swift_RegexParser", "swiftSynchronization",
      "swiftDispatch", "dispatch", "BlocksRuntime", "swiftRuntime", "swiftGlibc", "swift_Builtin_float",
      "swift_math", "swiftSwiftOnoneSupport", "swift_Volatile"]),
    ("BoringSSL (swift-crypto's copy)", ["CCryptoBoringSSL", "CCryptoBoringSSLShims"]),
    ("BoringSSL (swift-nio-ssl's copy)", ["CNIOBoringSSL", "CNIOBoringSSLShims"]),
    ("swift-crypto, jwt-kit, swift-certificates, swift-asn1",
     ["Crypto", "CryptoExtras", "_CryptoExtras", "CryptoBoringWrapper", "JWTKit", "X509", "SwiftASN1",
      "_CertificateInternals", "CXKCP", "CXKCPShims", "ExtrasBase64"]),
    ("SwiftNIO, NIOSSL, NIOHTTP2, AsyncHTTPClient", []),  # every NIO* / CNIO* / *HTTP* module: see group_of
    ("TOMLKit (toml++)", ["TOMLKit", "CTOML"]),
    ("ArgumentParser", ["ArgumentParser", "ArgumentParserToolInfo"]),
    ("other packages (log, lifecycle, collections, atomics, ...)", []),
    # Every directory of Sources/ is one of our modules (`auth-agent`'s objects are in `auth_agent.build`).
    ("auth-agent's own modules", sorted(d.name.replace("-", "_")
                                        for d in (Path(__file__).resolve().parent.parent / "Sources").iterdir()
                                        if d.is_dir())),
    ("C libraries linked statically (glibc, libstdc++, libgcc)", ["c", "m", "pthread", "stdc++", "gcc", "gcc_eh"]),
    ("symbols of unknown origin", []),
]
OWN = {name: row for row, names in GROUPS for name in names}


def group_of(origin: str) -> str:
    if origin in OWN:
        return OWN[origin]
    if origin.startswith(("NIO", "CNIO", "_NIO")) or "HTTP" in origin:
        return "SwiftNIO, NIOSSL, NIOHTTP2, AsyncHTTPClient"
    return "other packages (log, lifecycle, collections, atomics, ...)"


def defined_symbols(paths):
    """name -> (size) of the defined symbols in object files or archives (nm -P: name type value size)."""
    out = subprocess.run(["nm", "-P", "--defined-only", *map(str, paths)], capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.endswith(":"):
            names.add(parts[0])
    return names


def origin_index(build_dir: Path, static_dir: Path):
    index = {}
    # C libraries first, so that the build's and the toolchain's definitions below win on a shared name.
    for lib in ("c", "m", "stdc++", "gcc", "gcc_eh"):
        path = subprocess.run(["gcc", f"-print-file-name=lib{lib}.a"], capture_output=True, text=True).stdout.strip()
        if path and Path(path).is_file():
            index.update(dict.fromkeys(defined_symbols([path]), lib))
    for archive in sorted(static_dir.glob("lib*.a")):
        index.update(dict.fromkeys(defined_symbols([archive]), archive.name[3:-2]))
    for module in sorted(build_dir.glob("*.build")):
        objects = sorted(module.rglob("*.o"))
        if objects:
            index.update(dict.fromkeys(defined_symbols(objects), module.name[:-6]))
    return index


def symbol_bytes(binary: Path, index):
    rows = defaultdict(int)
    out = subprocess.run(["nm", "-S", "-P", "--defined-only", str(binary)], capture_output=True, text=True).stdout
    for line in out.splitlines():
        # name type value size; a few C++ names (e.g. "operator new") contain spaces.
        match = re.fullmatch(r"(.+) (\S) [0-9a-f]+ ([0-9a-f]+)", line)
        if not match:
            continue
        name, kind, size = match.group(1), match.group(2), int(match.group(3), 16)
        if kind in "bB":
            continue  # .bss: no bytes in the file
        if re.fullmatch(r"icudt\d+_dat", name):
            rows["ICU data (icudt*_dat, full Foundation)"] += size
        elif name in index:
            rows[group_of(index[name])] += size
        else:
            rows["symbols of unknown origin"] += size
    return rows


def sections(binary: Path):
    out = subprocess.run(["size", "-A", str(binary)], capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        # Sections with an address are loaded; .bss and .tbss take no bytes in the file.
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() and int(parts[2]) > 0 \
                and parts[0] not in (".bss", ".tbss"):
            found[parts[0]] = int(parts[1])
    return found


def main():
    built, installed, static_dir = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    names = sys.argv[4:] or ["auth-agent", "authctl"]
    mb = lambda n: f"{n / 1e6:9.1f}"  # noqa: E731
    index = origin_index(built, static_dir)
    print(f"{'MB':58}" + "".join(f"{n:>12}" for n in names) + f"{'together':>12}")
    def row(label, values):
        print(f"{label[:58]:58}" + "".join(f"{mb(v):>12}" for v in values) + f"{mb(sum(values)):>12}")
    row("as built (with symbols)", [(built / n).stat().st_size for n in names])
    stripped = [(installed / n).stat().st_size for n in names]
    row("installed (make install: stripped)", stripped)
    print("\nsections of the installed binary (size -A)")
    per = [sections(installed / n) for n in names]
    def section_group(name):
        if name.startswith("swift5_"):
            return "Swift metadata (swift5_*)"
        return {".text": ".text (code)", ".rodata": ".rodata (constants; ICU data)", ".eh_frame": "unwind tables",
                ".eh_frame_hdr": "unwind tables", ".gcc_except_table": "unwind tables",
                ".data.rel.ro": "relocated data (.data.rel.ro, .data, .got)", ".data": "relocated data (.data.rel.ro, .data, .got)",
                ".got": "relocated data (.data.rel.ro, .data, .got)"}.get(name, "other sections")
    order = [".text (code)", ".rodata (constants; ICU data)", "unwind tables", "Swift metadata (swift5_*)",
             "relocated data (.data.rel.ro, .data, .got)", "other sections"]
    for label in order:
        values = [sum(size for name, size in s.items() if section_group(name) == label) for s in per]
        row("  " + label, values)
    print("\nsymbol bytes by origin (nm -S of the binary as built; each symbol's defining object or archive)")
    rows = [symbol_bytes(built / n, index) for n in names]
    for label, _ in GROUPS:
        values = [r.get(label, 0) for r in rows]
        if any(values):
            row("  " + label, values)
    row("  no symbol (metadata, unwind, relocations, alignment)",
        [max(0, s - sum(r.values())) for s, r in zip(stripped, rows)])


if __name__ == "__main__":
    main()
