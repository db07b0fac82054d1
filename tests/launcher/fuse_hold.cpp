// A FUSE file system that never answers: the honest way for a test to make a process
// unkillable for a while. It mounts itself on MOUNTPOINT, answers the kernel's INIT, prints
// "ready", and then reads every request and answers none, printing "held OPCODE PID" for each.
// A process that touches MOUNTPOINT waits for its answer; once it has a fatal signal (SIGTERM
// with no handler, SIGKILL) the kernel waits for the request uninterruptibly: the process is in
// state D, as one stuck on a hung NFS server or in a driver, and SIGKILL cannot end it. When
// stdin reaches its end (or on SIGTERM) this program unmounts and closes /dev/fuse, which aborts
// the connection: every held request fails and the process dies.
//
//   fuse_hold MOUNTPOINT      exit 77 when FUSE cannot be had here (no /dev/fuse, not root)
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuse_hold MOUNTPOINT\n");
    return 2;
  }
  const char* mnt = argv[1];
  const int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    std::printf("SKIPPED: cannot open /dev/fuse: %s\n", std::strerror(errno));
    return 77;
  }
  const std::string opts = "fd=" + std::to_string(fd) + ",rootmode=40000,user_id=0,group_id=0";
  if (mount("fuse_hold", mnt, "fuse.fuse_hold", MS_NOSUID | MS_NODEV, opts.c_str()) < 0) {
    std::printf("SKIPPED: cannot mount FUSE on %s: %s (needs root)\n", mnt, std::strerror(errno));
    return 77;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  std::vector<char> buf(FUSE_MIN_READ_BUFFER + (1 << 20));
  for (;;) {
    pollfd p[2] = {{fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    timespec tick{0, 100'000'000};  // the stop signals are looked at between polls
    const int r = ppoll(p, 2, &tick, nullptr);
    sigset_t pending;
    if (sigpending(&pending) == 0 && (sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT))) break;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (p[1].revents & (POLLIN | POLLHUP))) {
      char c;
      if (r < 0 || read(STDIN_FILENO, &c, 1) <= 0) break;  // stdin's end: let everything go
    }
    if (!(p[0].revents & POLLIN)) continue;
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) break;  // unmounted under us
    const auto* in = reinterpret_cast<const fuse_in_header*>(buf.data());
    if (in->opcode == FUSE_INIT) {
      const auto* init = reinterpret_cast<const fuse_init_in*>(buf.data() + sizeof *in);
      struct {
        fuse_out_header h;
        fuse_init_out o;
      } reply{};
      reply.h.len = sizeof reply;
      reply.h.unique = in->unique;
      reply.o.major = FUSE_KERNEL_VERSION;
      reply.o.minor = init->minor < FUSE_KERNEL_MINOR_VERSION ? init->minor : FUSE_KERNEL_MINOR_VERSION;
      reply.o.max_readahead = init->max_readahead;
      reply.o.max_write = 4096;
      reply.o.max_background = 16;
      reply.o.congestion_threshold = 12;
      if (write(fd, &reply, sizeof reply) != static_cast<ssize_t>(sizeof reply)) break;
      std::printf("ready\n");
    } else {
      std::printf("held %u %u\n", in->opcode, in->pid);
    }
    std::fflush(stdout);
  }
  umount2(mnt, MNT_DETACH);
  close(fd);  // aborts the connection: the held requests end with an error
  return 0;
}
