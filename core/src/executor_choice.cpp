#include "offloadkit/executor_choice.hpp"

#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"

namespace offloadkit {

executor_choice choose_executor(const std::string& asked) {
  if (asked != "auto" && asked != "host" && asked != "cuda") {
    throw out_of_range("executor '" + asked + "' is not one of the valid values auto, host, cuda");
  }
  if (asked == "host") return {"host", "asked for with --executor host"};
  const std::string reason = cuda_unavailable_reason();
  if (reason.empty()) {
    return {"cuda", asked == "auto" ? "a GPU is usable" : "asked for with --executor cuda"};
  }
  if (asked == "cuda") throw unavailable_error("the cuda back end cannot run here: " + reason);
  return {"host", "the cuda back end is unavailable: " + reason};
}

std::unique_ptr<executor> make_executor(const std::string& name) {
  if (choose_executor(name).name == "cuda") return std::make_unique<cuda_executor>();
  return std::make_unique<host_executor>();
}

}  // namespace offloadkit
