// Typed exceptions and the macros that throw them. Library code reports every failure through
// these; nothing in offloadkit calls exit() or abort().
#pragma once

#include <cstddef>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>

namespace offloadkit {

/// A precondition or an invariant was violated by the caller (bad argument, bad state).
class logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// A value lies outside its valid range; the message names the value and the range.
class out_of_range : public logic_error {
 public:
  using logic_error::logic_error;
};

/// An operation is not valid in the object's current state (pause twice, use after release...).
class state_error : public logic_error {
 public:
  using logic_error::logic_error;
};

/// The implementation does not provide the operation asked for (a pause mode its declared profile
/// does not offer, say); nothing was changed.
class unsupported_error : public logic_error {
 public:
  using logic_error::logic_error;
};

/// A failure reported by the platform (CUDA runtime/driver, the OS) or by fault injection.
class runtime_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A CUDA runtime or driver call failed; the message carries the call, file:line, error name and
/// string.
class cuda_error : public runtime_error {
 public:
  cuda_error(const std::string& what, int code) : runtime_error(what), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

/// A fault planted by the fault-injection adaptor.
class injected_fault : public runtime_error {
 public:
  using runtime_error::runtime_error;
};

/// An input file cannot be read or its contents are invalid (or an output file cannot be
/// written); the message names the file and, for bad contents, where and why. The offloadkit
/// command exits with status 5 for it.
class input_error : public runtime_error {
 public:
  using runtime_error::runtime_error;
};

/// What a command needs cannot run here: no usable GPU for the cuda executor, CUPTI missing, the
/// pools of a replay do not fit in memory. The offloadkit command exits with status 3 for it.
class unavailable_error : public runtime_error {
 public:
  using runtime_error::runtime_error;
};

/// A plugin library or Python implementation cannot be loaded, breaks the ABI, or has nothing to
/// run here; the message names it and what was expected. The offloadkit command exits with
/// status 4 for it.
class plugin_unusable : public runtime_error {
 public:
  using runtime_error::runtime_error;
};

/// An allocation failed for a reason other than lack of memory.
class bad_alloc : public std::bad_alloc {
 public:
  explicit bad_alloc(std::string what) : what_(std::move(what)) {}
  [[nodiscard]] const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

/// An allocation failed because the memory it asked for is not available.
class out_of_memory : public bad_alloc {
 public:
  using bad_alloc::bad_alloc;
};

namespace detail {

template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <class Exception>
[[noreturn]] void throw_at(const char* file, int line, const std::string& msg) {
  throw Exception(concat(msg, " (", file, ":", line, ")"));
}

}  // namespace detail
}  // namespace offloadkit

/// Throws `Exception` with the streamed message and file:line when `cond` is false.
/// Example: OFFLOADKIT_EXPECTS(n <= limit, out_of_range, "n = ", n, " exceeds ", limit);
#define OFFLOADKIT_EXPECTS(cond, Exception, ...)                                            \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      ::offloadkit::detail::throw_at<Exception>(__FILE__, __LINE__,                         \
                                                ::offloadkit::detail::concat(__VA_ARGS__)); \
    }                                                                                       \
  } while (0)

/// Throws `Exception` unconditionally with the streamed message and file:line.
#define OFFLOADKIT_FAIL(Exception, ...)                         \
  ::offloadkit::detail::throw_at<Exception>(__FILE__, __LINE__, \
                                            ::offloadkit::detail::concat(__VA_ARGS__))

/// For destructors and other noexcept paths: never throws; reports in debug builds only.
#ifdef NDEBUG
#define OFFLOADKIT_ASSERT_NOEXCEPT(call) \
  do {                                   \
    (void)(call);                        \
  } while (0)
#else
#define OFFLOADKIT_ASSERT_NOEXCEPT(call) \
  ::offloadkit::detail::assert_noexcept((call), #call, __FILE__, __LINE__)
namespace offloadkit::detail {
void assert_noexcept(bool ok, const char* call, const char* file, int line) noexcept;
}
#endif
