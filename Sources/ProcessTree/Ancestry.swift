/// The walk from a process up to the program that ran it through shells: the agent's for the program behind its
/// authctl (`passwordeval`'s `sh -c`, git's `!` helpers), authctl's on a host for the program that asked through a
/// forward. Generic over how a process is read, so the agent reads identities and authctl paths, and the tests an
/// in-memory table.
public enum Ancestry {
    /// What the walk found: the nearest ancestor of the starting process that is not a shell, its pid, and the shells
    /// passed on the way, nearest first.
    public struct Found<Program> {
        public var program: Program
        public var pid: Int32
        public var shells: [String]
    }

    /// The first ancestor of `pid` that is not a shell (`shell` gives a shell's name, nil for anything else), passing
    /// at most `maxShells` shells. Nil when the chain cannot be read or tied: a parent gone or outside the pid
    /// namespace (`parent` nil or 0), more shells, or a parent that changed while it was read.
    ///
    /// The walk is tied to the processes without a pidfd, the same on every kernel: after everything was read, each
    /// process's parent is read again, from the top of the chain down. A process keeps its pid until its parent reaps
    /// it, and before that the kernel moves its children to another parent (a subreaper or init). So a child that
    /// still names the same parent after its parent was read had that parent, alive, all along: what was read of the
    /// parent was its own. The starting process itself is vouched for by its reader.
    public static func firstNotShell<Program>(above pid: Int32, parent: (Int32) -> Int32?, read: (Int32) -> Program,
                                              shell: (Program) -> String?, maxShells: Int) -> Found<Program>? {
        // Pids from the start upwards; each one's parent is the next.
        var chain = [pid]
        var shells: [String] = []
        var program: Program
        while true {
            guard let next = parent(chain[chain.count - 1]), next > 0 else { return nil }
            chain.append(next)
            program = read(next)
            guard let name = shell(program) else { break }
            guard shells.count < maxShells else { return nil }
            shells.append(name)
        }
        // Top down: each check proves that the process above was alive when the one above it was checked.
        for index in stride(from: chain.count - 2, through: 0, by: -1) {
            guard parent(chain[index]) == chain[index + 1] else { return nil }
        }
        return Found(program: program, pid: chain[chain.count - 1], shells: shells)
    }
}
