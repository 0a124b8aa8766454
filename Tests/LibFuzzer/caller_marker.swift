// libFuzzer target: a caller's sandbox marker and the words people read about a caller, compiled with the pure
// sources only (no /proc): ``FlatpakInfo/kind(marker:complete:home:mismatch:)`` (the parser of `/.flatpak-info` and
// the kind it makes) and ``WireCaller/described(withPID:)`` (the one describer) over the wire form of that kind.
// Built and run by `scripts/libfuzz`; seeds in Tests/Fuzz/corpus/caller_marker. The input is the marker's text; its
// first byte also chooses whether it is read whole or as a prefix, and whether its instance is believed.
//
// Properties, checked on every input (a violation aborts, so libFuzzer saves the input as a crash):
// - no marker makes a confined kind: whatever the text, the caller is a Flatpak app or unidentified, never a program
//   of the desktop or host code, and an unidentified one is named by nothing;
// - no description carries a control, format, bidi, line or paragraph separator or private-use character, for the
//   kind the marker made and for the same text as a forwarded host's program, host name, app and unit.
#if canImport(Glibc)
import Glibc
#endif

func checkShown(_ text: String, _ what: String) {
    for scalar in text.unicodeScalars {
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator, .privateUse, .surrogate, .unassigned:
            violated("\(what) shows U+\(String(scalar.value, radix: 16, uppercase: true))")
        default: continue
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let flags = bytes.first ?? 0
    let text = String(decoding: bytes.dropFirst(), as: UTF8.self)
    let complete = flags & 1 == 0
    let kind = FlatpakInfo.kind(marker: text, complete: complete, home: "/home/alice") { _ in flags & 2 == 0 ? nil : "not that instance" }
    let identity = ClientIdentity(kind, exe: text, unit: text)
    guard identity.isConfined else { violated("a marker made a caller that is not confined: \(kind)") }
    switch kind {
    case .flatpak(let app):
        guard identity.consentKey == "flatpak:\(app.id)", ClientRule.isFlatpakAppID(app.id) else { violated("an app named by an invalid id") }
    case .unidentified:
        guard identity.consentKey == nil, identity.policyExe == nil, identity.entry == nil else { violated("an unidentified caller is named") }
    default:
        violated("a marker made \(kind)")
    }
    checkShown(WireCaller(pid: 1, via: "socket", identity: identity).described(withPID: true), "the app's description")
    var host = ClientIdentity(.forwarded(.init(name: text, fingerprint: text, program: text, session: "s")), exe: text, unit: text)
    host.relay = .init(exe: text, unit: text, shells: [text])
    checkShown(WireCaller(pid: 1, via: text, identity: host).described(withPID: true), "a host's description")
    var unknown = WireCaller(pid: 1, via: text, identity: ClientIdentity(.desktop, exe: text, unit: text))
    unknown.kind = text
    checkShown(unknown.described(withPID: true), "an unknown kind's description")
    return 0
}
