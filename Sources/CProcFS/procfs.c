#define _GNU_SOURCE
#include "procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* "/proc/" PID "/" name into path (32 bytes hold any pid and a name of up to 14 bytes), formatted by hand (no
 * snprintf, no Swift string): it runs several times for every connection. Every /proc/PID path of this file
 * is made here. -1 (ESRCH) for a pid <= 0. */
static int proc_path(char path[32], int32_t pid, const char *name) {
    char digits[12];
    int count = 0, at = 6;
    if (pid <= 0) {
        errno = ESRCH;
        return -1;
    }
    memcpy(path, "/proc/", 6);
    for (uint32_t left = (uint32_t)pid; left > 0; left /= 10) digits[count++] = (char)('0' + left % 10);
    while (count > 0) path[at++] = digits[--count];
    path[at++] = '/';
    memcpy(path + at, name, strlen(name) + 1);
    return 0;
}

#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x00001000U
#endif

int aa_file_info_at(int dir_fd, const char *path, int empty_path, struct aa_file_info *info) {
    struct statx attributes;
    int flags = AT_STATX_DONT_SYNC | (empty_path ? AT_EMPTY_PATH : 0);
    if (statx(dir_fd, path, flags, STATX_TYPE | STATX_INO | STATX_SIZE | STATX_MNT_ID | STATX_MTIME | STATX_CTIME,
              &attributes) != 0)
        return -1;
    info->device = ((uint64_t)attributes.stx_dev_major << 32) | attributes.stx_dev_minor;
    info->inode = attributes.stx_ino;
    info->size = attributes.stx_size;
    info->mode = attributes.stx_mode;
    info->mount_id = (attributes.stx_mask & STATX_MNT_ID) ? attributes.stx_mnt_id : 0;
    info->modified_ns = attributes.stx_mtime.tv_sec * 1000000000LL + attributes.stx_mtime.tv_nsec;
    info->changed_ns = attributes.stx_ctime.tv_sec * 1000000000LL + attributes.stx_ctime.tv_nsec;
    return 0;
}

int aa_proc_exe_info(int32_t pid, struct aa_file_info *info) {
    char path[32];
    if (proc_path(path, pid, "exe") != 0) return -1;
    return aa_file_info_at(AT_FDCWD, path, 0, info);
}

static struct stat own_pid_namespace, own_user_namespace;
static int own_namespaces_read;
static pthread_once_t own_namespaces_once = PTHREAD_ONCE_INIT;

static void read_own_namespaces(void) {
    own_namespaces_read = stat("/proc/self/ns/pid", &own_pid_namespace) == 0 &&
                          stat("/proc/self/ns/user", &own_user_namespace) == 0;
}

int aa_proc_pid_namespace_foreign(int32_t pid) {
    pthread_once(&own_namespaces_once, read_own_namespaces);
    char path[32];
    struct stat theirs, owner;
    if (!own_namespaces_read || proc_path(path, pid, "ns/pid") != 0 || stat(path, &theirs) != 0) return -1;
    if (theirs.st_dev == own_pid_namespace.st_dev && theirs.st_ino == own_pid_namespace.st_ino) return 0;
    int namespace_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (namespace_fd < 0) return -1;
    int owner_fd = ioctl(namespace_fd, NS_GET_USERNS);
    close(namespace_fd);
    if (owner_fd < 0) return -1;
    int stated = fstat(owner_fd, &owner);
    close(owner_fd);
    if (stated != 0) return -1;
    return owner.st_dev == own_user_namespace.st_dev && owner.st_ino == own_user_namespace.st_ino ? 0 : 1;
}

int aa_open_path_nofollow(const char *path) {
    for (;;) {
        int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 || errno != EINTR) return fd;
    }
}

long aa_read_reopened(int path_fd, void *buffer, unsigned long capacity) {
    char path[40];
    snprintf(path, sizeof path, "/proc/self/fd/%d", path_fd);
    int fd;
    do { fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC); } while (fd < 0 && errno == EINTR);
    if (fd < 0) return -1;
    unsigned long total = 0;
    while (total < capacity) {
        ssize_t n = read(fd, (char *)buffer + total, capacity - total);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        if (n == 0) break;
        total += (unsigned long)n;
    }
    close(fd);
    return (long)total;
}


int aa_process_holds_socket(int32_t pid, uint64_t inode) {
    char path[32], wanted[40], link[64];
    if (proc_path(path, pid, "fd") != 0) return -1;
    int wanted_length = snprintf(wanted, sizeof wanted, "socket:[%llu]", (unsigned long long)inode);
    int directory = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory < 0) return -1;
    DIR *entries = fdopendir(directory);
    if (!entries) {
        close(directory);
        return -1;
    }
    int found = 0;
    struct dirent *entry;
    while (!found && (entry = readdir(entries)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        ssize_t n = readlinkat(directory, entry->d_name, link, sizeof link);
        found = n == wanted_length && memcmp(link, wanted, (size_t)n) == 0;
    }
    closedir(entries);
    return found;
}
