// run_child(): posix_spawn (no fork of this process's memory, which may hold CUDA state), a new
// process group, one pipe for stdout and stderr read while the child runs (so a chatty child never
// blocks on a full pipe), and a poll loop that watches the child, the time limit and the parent's
// own interrupt signals together.
#include "isolation.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string_view>
#include <system_error>
#include <utility>

extern char** environ;

namespace offloadkit::tools {
namespace {

[[noreturn]] void throw_errno(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

/// A file descriptor closed when it goes out of scope.
class unique_fd {
 public:
  explicit unique_fd(int fd = -1) : fd_(fd) {}
  ~unique_fd() { reset(); }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// The signal that asked this process to stop while a child ran; 0 while none did. A handler may
// only store to a lock-free atomic (or a volatile sig_atomic_t).
std::atomic<int> pending_interrupt{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void note_interrupt(int signal) { pending_interrupt.store(signal); }

/// While alive, SIGINT, SIGTERM and SIGHUP are noted instead of ending this process, so that the
/// child (in its own process group, out of reach of the terminal's Ctrl-C) is killed rather than
/// left running. A signal this process ignores stays ignored.
class interrupt_guard {
 public:
  interrupt_guard() {
    pending_interrupt.store(0);
    struct sigaction note {};
    note.sa_handler = note_interrupt;
    sigemptyset(&note.sa_mask);
    for (std::size_t i = 0; i < std::size(guarded_signals); ++i) {
      installed_[i] = false;
      if (::sigaction(guarded_signals[i], nullptr, &previous_[i]) != 0) continue;
      if (previous_[i].sa_handler == SIG_IGN) continue;
      installed_[i] = ::sigaction(guarded_signals[i], &note, nullptr) == 0;
    }
  }
  ~interrupt_guard() {
    for (std::size_t i = 0; i < std::size(guarded_signals); ++i) {
      if (installed_[i]) ::sigaction(guarded_signals[i], &previous_[i], nullptr);
    }
  }
  interrupt_guard(const interrupt_guard&) = delete;
  interrupt_guard& operator=(const interrupt_guard&) = delete;

 private:
  static constexpr int guarded_signals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction previous_[3]{};
  bool installed_[3] = {};
};

/// posix_spawn's attributes and file actions, destroyed with the scope.
struct spawn_setup {
  posix_spawnattr_t attr{};
  posix_spawn_file_actions_t actions{};
  spawn_setup() {
    if (int err = posix_spawnattr_init(&attr); err != 0) throw_errno(err, "posix_spawnattr_init");
    if (int err = posix_spawn_file_actions_init(&actions); err != 0) {
      posix_spawnattr_destroy(&attr);
      throw_errno(err, "posix_spawn_file_actions_init");
    }
  }
  ~spawn_setup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  spawn_setup(const spawn_setup&) = delete;
  spawn_setup& operator=(const spawn_setup&) = delete;
};

void check_spawn(int err, const char* what) {
  if (err != 0) throw_errno(err, what);
}

/// Appends what `fd` has to `tail`, keeping at most `limit` bytes (the newest). Returns false at
/// end of file (every writer gone) or on an error other than "nothing to read now".
bool drain(int fd, std::string& tail, std::size_t limit) {
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      tail.append(buffer, static_cast<std::size_t>(n));
      // Trim in chunks, not per read: the tail is rebuilt at most once per `limit` bytes read.
      if (tail.size() > 2 * limit) tail.erase(0, tail.size() - limit);
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

int reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw_errno(errno, "waitpid");
  }
  return status;
}

std::string format_seconds(std::chrono::milliseconds d) {
  const auto ms = d.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms / 1000) + "." + std::to_string((ms % 1000) / 100) + " s";
}

}  // namespace

child_run run_child(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                    int extra_fd, int child_fd, std::size_t output_tail_bytes,
                    const std::vector<std::string>& environment,
                    std::chrono::milliseconds after_result) {
  if (argv.empty()) throw std::invalid_argument("run_child: empty argv");
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // This process's environment less the variables `environment` sets, then those.
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto replaced = std::any_of(environment.begin(), environment.end(), [&](const auto& v) {
      const auto eq = v.find('=');
      return eq != std::string::npos &&
             entry.substr(0, eq + 1) == std::string_view(v).substr(0, eq + 1);
    });
    if (!replaced) env.push_back(*e);
  }
  for (const auto& v : environment) env.push_back(const_cast<char*>(v.c_str()));
  env.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw_errno(errno, "pipe2");
  unique_fd out_read(pipe_fds[0]);
  unique_fd out_write(pipe_fds[1]);
  if (::fcntl(out_read.get(), F_SETFL, O_NONBLOCK) != 0) throw_errno(errno, "fcntl(O_NONBLOCK)");

  // dup2 onto the same number would leave close-on-exec set: hand the child a copy instead.
  unique_fd extra_copy;
  if (extra_fd >= 0 && extra_fd == child_fd) {
    extra_copy.reset(::fcntl(extra_fd, F_DUPFD_CLOEXEC, child_fd + 1));
    if (extra_copy.get() < 0) throw_errno(errno, "fcntl(F_DUPFD_CLOEXEC)");
    extra_fd = extra_copy.get();
  }

  spawn_setup setup;
  check_spawn(posix_spawn_file_actions_addopen(&setup.actions, 0, "/dev/null", O_RDONLY, 0),
              "posix_spawn_file_actions_addopen");
  check_spawn(posix_spawn_file_actions_adddup2(&setup.actions, out_write.get(), 1),
              "posix_spawn_file_actions_adddup2");
  check_spawn(posix_spawn_file_actions_adddup2(&setup.actions, out_write.get(), 2),
              "posix_spawn_file_actions_adddup2");
  if (extra_fd >= 0) {
    check_spawn(posix_spawn_file_actions_adddup2(&setup.actions, extra_fd, child_fd),
                "posix_spawn_file_actions_adddup2");
  }
  // Its own process group: the time limit kills everything the child started, and the terminal's
  // Ctrl-C reaches only this process, which then stops the child itself.
  check_spawn(posix_spawnattr_setpgroup(&setup.attr, 0), "posix_spawnattr_setpgroup");
  // Handlers are reset by exec, but ignored signals and the mask are inherited: give the child
  // the defaults, so that a broken pipe or a SIGTERM behaves as it would in a plain run.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&defaults, s);
  check_spawn(posix_spawnattr_setsigdefault(&setup.attr, &defaults),
              "posix_spawnattr_setsigdefault");
  sigset_t empty;
  sigemptyset(&empty);
  check_spawn(posix_spawnattr_setsigmask(&setup.attr, &empty), "posix_spawnattr_setsigmask");
  check_spawn(posix_spawnattr_setflags(&setup.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                                        POSIX_SPAWN_SETSIGMASK),
              "posix_spawnattr_setflags");

  const interrupt_guard guard;
  const auto start = std::chrono::steady_clock::now();
  auto deadline = start + timeout;
  // The descriptor whose first bytes start the grace (the caller's own; the child has a copy).
  const int watched = after_result.count() > 0 ? extra_fd : -1;
  bool result_seen = false;
  pid_t pid = -1;
  if (int err = posix_spawn(&pid, args[0], &setup.actions, &setup.attr, args.data(), env.data());
      err != 0) {
    throw_errno(err, "cannot start " + argv[0]);
  }
  // Only the child may hold the write end now, so that the pipe reports end of file when the
  // child's group is gone.
  out_write.reset();

  child_run run;
  bool pipe_open = true;
  int status = 0;
  bool ended_by_itself = false;
  for (;;) {
    if (const int sig = pending_interrupt.load(); sig != 0) {
      run.how = child_run::end::interrupted;
      run.signal = sig;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (watched >= 0 && !result_seen) {
      struct stat st {};
      if (::fstat(watched, &st) == 0 && st.st_size > 0) {
        result_seen = true;
        if (now + after_result < deadline) {
          deadline = now + after_result;
          run.past_grace = true;  // kept only if the deadline below is the one reached
          run.grace = after_result;
        }
      }
    }
    if (now >= deadline) {
      run.how = child_run::end::timed_out;
      break;
    }
    // Look at the child without reaping it: while it is a zombie its pid still names its process
    // group, so the kill below cannot reach an unrelated process that reused the number.
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 &&
        errno != EINTR) {
      throw_errno(errno, "waitid");
    }
    if (info.si_pid != 0) {
      ended_by_itself = true;
      break;
    }
    // Wake at least every 100 ms: the child may end without closing the pipe (a grandchild holds
    // it), and an interrupt is only noted, not delivered to this loop.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const int wait_ms = static_cast<int>(std::clamp<long long>(left.count() + 1, 1, 100));
    if (pipe_open) {
      pollfd p{out_read.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, wait_ms);
      if (ready < 0 && errno != EINTR) throw_errno(errno, "poll");
      if (ready > 0) pipe_open = drain(out_read.get(), run.output, output_tail_bytes);
    } else {
      ::poll(nullptr, 0, wait_ms);
    }
  }
  // Whatever ended the wait, nothing of the child's group may outlive it. ESRCH (the group is
  // already empty) is the usual answer for a child that ended by itself.
  ::kill(-pid, SIGKILL);
  status = reap(pid);
  if (pipe_open) drain(out_read.get(), run.output, output_tail_bytes);
  if (run.output.size() > output_tail_bytes) {
    run.output.erase(0, run.output.size() - output_tail_bytes);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (run.how != child_run::end::timed_out) run.past_grace = false;
  if (ended_by_itself) {
    if (WIFSIGNALED(status)) {
      run.how = child_run::end::signaled;
      run.signal = WTERMSIG(status);
    } else {
      run.how = child_run::end::exited;
      run.exit_code = WEXITSTATUS(status);
    }
  }
  return run;
}

std::string signal_name(int signal) {
  static const std::pair<int, const char*> names[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  for (const auto& [number, name] : names) {
    if (number == signal) return name;
  }
  return "signal " + std::to_string(signal);
}

std::string describe_end(const child_run& run, std::chrono::milliseconds timeout) {
  switch (run.how) {
    case child_run::end::exited:
      return "exited with code " + std::to_string(run.exit_code);
    case child_run::end::signaled:
      return "crashed: signal " + std::to_string(run.signal) + " (" + signal_name(run.signal) + ")";
    case child_run::end::timed_out:
      if (run.past_grace) {
        return "still running " + format_seconds(run.grace) + " after its result (killed)";
      }
      return "timed out after " + format_seconds(timeout);
    case child_run::end::interrupted:
      return "interrupted by " + signal_name(run.signal);
  }
  return "ended in an unknown way";
}

std::string self_executable() {
  std::string path(4096, '\0');
  for (;;) {
    const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size());
    if (n < 0) throw_errno(errno, "readlink(/proc/self/exe)");
    if (static_cast<std::size_t>(n) < path.size()) {
      path.resize(static_cast<std::size_t>(n));
      return path;
    }
    path.resize(path.size() * 2);
  }
}

std::string last_lines(const std::string& text, std::size_t lines) {
  std::size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  std::size_t begin = end;
  for (std::size_t seen = 0; begin > 0; --begin) {
    if (text[begin - 1] == '\n' && ++seen == lines) break;
  }
  return text.substr(begin, end - begin);
}

result_file::result_file() {
  fd_ = ::memfd_create("offloadkit-result", MFD_CLOEXEC);
  if (fd_ < 0) throw_errno(errno, "memfd_create");
}

result_file::~result_file() {
  if (fd_ >= 0) ::close(fd_);
}

std::string result_file::read_all() const {
  std::string out;
  char buffer[16384];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(fd_, buffer, sizeof buffer, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "reading a child's result");
    }
    if (n == 0) return out;
    out.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
}

void result_file::clear() {
  if (::ftruncate(fd_, 0) != 0) throw_errno(errno, "ftruncate of a result file");
}

void write_result(int fd, const std::string& text) {
  if (::ftruncate(fd, 0) != 0) throw_errno(errno, "ftruncate of the result file");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n =
        ::pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "writing the result");
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace offloadkit::tools
