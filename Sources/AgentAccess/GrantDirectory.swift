import Glibc

/// A grant's directory (`grants/NAME`) once its grant has ended. The workload may have written into it through a
/// writable mount and may still hold that mount. A later grant of the same name must never get this directory (the
/// old workload would reach the new grant through its old mount), so a directory that is not empty is moved aside
/// under a name no grant can have (`.ended-...`) and then emptied without following any link the workload made.
enum GrantDirectory {
    /// Entries removed at most per directory moved aside (the workload chose how many it left).
    static let removalBudget = 10_000
    /// Directory depth followed at most when emptying one.
    static let maxDepth = 16
    static let asidePrefix = ".ended-"

    enum Outcome: Equatable {
        /// Removed, or there was nothing at the path.
        case removed
        /// The workload left something in it: moved aside and emptied as far as the budget went.
        case movedAside
        /// Neither removed nor moved aside (errno's text): a later grant of the name is refused rather than given it.
        case kept(String)
    }

    /// Removes directory `path`, or moves it aside and empties it when something was left in it.
    @discardableResult
    static func retire(_ path: String) -> Outcome {
        if rmdir(path) == 0 || errno == ENOENT { return .removed }
        guard let slash = path.lastIndex(of: "/") else { return .kept(String(cString: strerror(errno))) }
        let aside = "\(path[..<slash])/\(asidePrefix)\(String(UInt64.random(in: .min ... .max), radix: 16))"
        guard rename(path, aside) == 0 else { return .kept(String(cString: strerror(errno))) }
        remove(aside)
        return .movedAside
    }

    /// Removes what earlier runs moved aside in `directory` and could not empty (the agent stopped before it did).
    static func sweep(_ directory: String) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        var budget = 1_000
        for name in names(in: fd, budget: &budget) {
            let text = String(decoding: name.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if text.hasPrefix(asidePrefix) { remove("\(directory)/\(text)") }
        }
        close(fd)
    }

    /// Empties and removes directory `path`, never following a symbolic link: each level is opened relative to the
    /// one above with `O_NOFOLLOW`, so a link the workload put in place of a directory is removed, not entered.
    static func remove(_ path: String) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        var budget = removalBudget
        empty(fd, depth: 0, budget: &budget)
        close(fd)
        rmdir(path)
    }

    private static func empty(_ fd: Int32, depth: Int, budget: inout Int) {
        for name in names(in: fd, budget: &budget) {
            if unlinkat(fd, name, 0) == 0 || errno != EISDIR { continue }
            if depth < maxDepth {
                let child = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if child >= 0 {
                    empty(child, depth: depth + 1, budget: &budget)
                    close(child)
                }
            }
            unlinkat(fd, name, AT_REMOVEDIR)
        }
    }

    /// The names in directory `fd` (not `.` and `..`) as the file system has them (any bytes, NUL-terminated), at
    /// most `budget` of them, which is reduced by as many.
    private static func names(in fd: Int32, budget: inout Int) -> [[CChar]] {
        let own = dup(fd)
        guard own >= 0 else { return [] }
        guard let stream = fdopendir(own) else {
            close(own)
            return []
        }
        defer { closedir(stream) }
        rewinddir(stream)
        var names: [[CChar]] = []
        while budget > 0, let entry = readdir(stream) {
            var name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                raw.prefix(while: { $0 != 0 }).map { CChar(bitPattern: $0) }
            }
            if name == [46] || name == [46, 46] { continue }  // "." and ".."
            name.append(0)
            names.append(name)
            budget -= 1
        }
        return names
    }
}
