/* What the agent reads of other processes and of files they name, in C: statx with cached attributes, /proc/PID
 * paths formatted without allocating, a process's pid namespace against the agent's (NS_GET_USERNS), opening a path
 * without following it or running an open handler, and the descriptors a process holds. Every function returns -1
 * with errno set on failure unless it says otherwise. */
#ifndef AUTH_AGENT_PROCFS_H
#define AUTH_AGENT_PROCFS_H
#include <stdint.h>

/* A file's attributes as the kernel has them cached (statx with AT_STATX_DONT_SYNC): never a round trip to a
 * filesystem's server, so a FUSE daemon of the caller cannot stall the agent here. `empty_path`: `dir_fd` itself is
 * the file (AT_EMPTY_PATH; it may be an O_PATH descriptor). `mount_id` is 0 when the kernel does not report it. */
/* modified_ns, changed_ns: mtime and ctime in nanoseconds since the epoch. */
struct aa_file_info { uint64_t device; uint64_t inode; uint64_t size; uint64_t mount_id; uint32_t mode; int64_t modified_ns; int64_t changed_ns; };
int aa_file_info_at(int dir_fd, const char *path, int empty_path, struct aa_file_info *info);
/* aa_file_info_at of "/proc/PID/exe", following the link: the file process `pid` runs now. */
int aa_proc_exe_info(int32_t pid, struct aa_file_info *info);
/* Whether process `pid` runs in a pid namespace that a user namespace other than the agent's owns (a rootless
 * container, `unshare -Urp`, a Flatpak sandbox). A process there may hold CAP_SYS_ADMIN over that pid namespace, and
 * then the kernel takes credentials it attaches naming any pid of the namespace (SCM_CREDENTIALS): the sender of bytes
 * cannot be told from the process that connected. 0: the agent's own pid namespace, or one made by a privileged
 * process (owned by the agent's user namespace); 1: owned by another; -1: unreadable (errno). */
int aa_proc_pid_namespace_foreign(int32_t pid);
/* open(O_PATH | O_NOFOLLOW | O_CLOEXEC): names the file (or the symlink itself) without opening it, so no FIFO,
 * device or filesystem open handler runs. */
int aa_open_path_nofollow(const char *path);
/* Opens the file `path_fd` (an O_PATH descriptor) names for reading, non-blocking and without acquiring a
 * controlling terminal, and reads up to `capacity` bytes. Returns the count, or -1. Only for regular files the
 * caller checked with aa_file_info_at first. */
long aa_read_reopened(int path_fd, void *buffer, unsigned long capacity);
/* Whether process `pid` (whoever has that pid now) holds a descriptor of socket `inode` (/proc/PID/fd links read
 * `socket:[INODE]`): 1 yes, 0 no, -1 its descriptors cannot be read. */
int aa_process_holds_socket(int32_t pid, uint64_t inode);
#endif
