import CAgentProcess
import Glibc

/// A detached thread of its own, for work that must never block the broker's executor or an event loop: the accept
/// loops and the D-Bus loops. A plain pthread: Foundation's `Thread` is in full Foundation, which the agent does not
/// link (docs/BENCHMARKS.md, "Installed size").
public enum DetachedThread {
    /// Starts `body` on a new thread named `name` (what `ps -L` and `top -H` show; the kernel keeps 15 bytes).
    /// `stackSize` nil keeps the default (RLIMIT_STACK). Not being able to start a thread (out of memory or
    /// threads) stops the agent, as any other allocation failure does: nothing would ever run `body`.
    public static func start(name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
        final class Start {
            let name: String
            let body: @Sendable () -> Void
            init(name: String, body: @escaping @Sendable () -> Void) {
                self.name = name
                self.body = body
            }
        }
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
        let context = Unmanaged.passRetained(Start(name: name, body: body))
        var thread = pthread_t()
        let result = pthread_create(&thread, &attributes, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            _ = aa_process_name_thread(start.name)
            start.body()
            return nil
        }, context.toOpaque())
        guard result == 0 else {
            context.release()
            fatalError("cannot start the thread '\(name)': \(String(cString: strerror(result)))")
        }
    }
}
