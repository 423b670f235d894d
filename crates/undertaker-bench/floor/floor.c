/* The floor of `undertaker run`'s structure, without undertaker (docs/BENCHMARKS.md,
 * "Where the time goes"): a minimal C wrapper that does only the kernel work each part
 * of that structure needs, so its loop time is what the structure costs at least.
 *
 *   floor FLAGS CMD [ARG...]      FLAGS: any of g c r, or - for none
 *     (none) fork + exec CMD, wait, exit with its status (what `tini -s` does)
 *     g      a second process: the one started forks a guardian that starts CMD and
 *            waits for it; the first waits for the guardian through a pidfd
 *     c      CMD born in a fresh cgroup v2 directory (clone3 CLONE_INTO_CGROUP),
 *            removed after CMD exits (FLOOR_CGROUP: the parent, default
 *            /sys/fs/cgroup/unified/undertaker, else /sys/fs/cgroup/undertaker)
 *     r      a record file in $FLOOR_STATE (default /tmp): created under a temporary
 *            name, flock'd, its first line written, renamed into place; one line
 *            appended after CMD starts and one after it exits (the file stays when
 *            FLOOR_STATE is set, as a real record does)
 *
 * Build: cc -O2 -o floor floor.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

static char line[512];

static void append(int fd, size_t n) {
  memset(line, 'x', n);
  line[n - 1] = '\n';
  if (write(fd, line, n) != (ssize_t)n) _exit(125);
}

static int status_of(int st) {
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Starts CMD (in the cgroup `cg_fd` when >= 0), waits, returns its status. */
static int guard(char **cmd, int cg_fd, int rec_fd) {
  struct clone_args args = {0};
  int pidfd = -1;
  args.flags = CLONE_PIDFD | (cg_fd >= 0 ? CLONE_INTO_CGROUP : 0);
  args.pidfd = (uint64_t)(uintptr_t)&pidfd;
  args.exit_signal = SIGCHLD;
  args.cgroup = cg_fd >= 0 ? (uint64_t)cg_fd : 0;
  long pid = syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0) _exit(125);
  if (pid == 0) {
    execvp(cmd[0], cmd);
    _exit(127);
  }
  if (rec_fd >= 0) append(rec_fd, 76);
  int st;
  while (waitpid((pid_t)pid, &st, 0) < 0) {}
  return status_of(st);
}

int main(int argc, char **argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0) {
    fprintf(stderr, "usage: floor FLAGS -- CMD [ARG...]\n");
    return 2;
  }
  const char *f = argv[1];
  int two = strchr(f, 'g') != NULL, cg = strchr(f, 'c') != NULL, rec = strchr(f, 'r') != NULL;
  char **cmd = argv + 3;
  if (two) {
    int pidfd = -1;
    struct clone_args args = {0};
    args.flags = CLONE_PIDFD;
    args.pidfd = (uint64_t)(uintptr_t)&pidfd;
    args.exit_signal = SIGCHLD;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid < 0) return 125;
    if (pid > 0) {
      siginfo_t si;
      while (waitid(P_PIDFD, pidfd, &si, WEXITED) < 0) {}
      return si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
    }
    setpgid(0, 0);
  }
  char cgdir[256] = "", path[256], tmp[256];
  int cg_fd = -1, rec_fd = -1;
  if (rec) {
    const char *dir = getenv("FLOOR_STATE") ? getenv("FLOOR_STATE") : "/tmp";
    snprintf(tmp, sizeof tmp, "%s/floor.%d.tmp", dir, getpid());
    snprintf(path, sizeof path, "%s/floor.%d.tree", dir, getpid());
    rec_fd = open(tmp, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (rec_fd < 0 || flock(rec_fd, LOCK_EX) != 0) return 125;
    append(rec_fd, 425);
    if (rename(tmp, path) != 0) return 125;
  }
  if (cg) {
    const char *parent = getenv("FLOOR_CGROUP");
    if (!parent) {
      struct stat s;
      parent = stat("/sys/fs/cgroup/unified/undertaker", &s) == 0
                   ? "/sys/fs/cgroup/unified/undertaker"
                   : "/sys/fs/cgroup/undertaker";
    }
    snprintf(cgdir, sizeof cgdir, "%s/floor.%d", parent, getpid());
    if (mkdir(cgdir, 0755) != 0) return 125;
    cg_fd = open(cgdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg_fd < 0) return 125;
  }
  int code = guard(cmd, cg_fd, rec_fd);
  if (cg) {
    close(cg_fd);
    while (rmdir(cgdir) != 0) usleep(50);
  }
  if (rec) {
    append(rec_fd, 55);
    close(rec_fd);
    /* A real record stays (folded later); without FLOOR_STATE, leave nothing. */
    if (!getenv("FLOOR_STATE")) unlink(path);
  }
  return code;
}
