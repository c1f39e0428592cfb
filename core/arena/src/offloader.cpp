// The offloader interface's checks shared by every implementation, and error context.
#include "offloadkit/arena/offloader.hpp"

#include "offloadkit/error.hpp"

namespace offloadkit::arena {

event offloader::offload(tensor_set_view set, stream_ref s) {
  OFFLOADKIT_EXPECTS(!released(), state_error, name(),
                     ": offload() after release(): its host memory was freed; use a new offloader");
  validate(set, "offload");
  return do_offload(set, s);
}

event offloader::reload(tensor_set_view set, stream_ref s) {
  OFFLOADKIT_EXPECTS(!released(), state_error, name(),
                     ": reload() after release(): its host memory was freed, there is nothing "
                     "to reload");
  validate(set, "reload");
  OFFLOADKIT_EXPECTS(holds_copy(), state_error, name(),
                     ": reload() without a complete host copy: offload() has not succeeded since "
                     "construction or since the last failed offload()");
  return do_reload(set, s);
}

namespace detail {

void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const out_of_memory& e) {
    throw out_of_memory(context + ": " + e.what());
  } catch (const bad_alloc& e) {
    throw bad_alloc(context + ": " + e.what());
  } catch (const injected_fault& e) {
    throw injected_fault(context + ": " + e.what());
  } catch (const cuda_error& e) {
    throw cuda_error(context + ": " + e.what(), e.code());
  } catch (const runtime_error& e) {
    throw runtime_error(context + ": " + e.what());
  } catch (const state_error& e) {
    throw state_error(context + ": " + e.what());
  } catch (const out_of_range& e) {
    throw out_of_range(context + ": " + e.what());
  } catch (const logic_error& e) {
    throw logic_error(context + ": " + e.what());
  } catch (const std::bad_alloc& e) {
    throw out_of_memory(context + ": " + e.what());
  } catch (const std::exception& e) {
    throw runtime_error(context + ": " + e.what());
  }
}

void expect_sizes(const std::vector<std::size_t>& sizes, tensor_set_view set,
                  const std::string& who) {
  OFFLOADKIT_EXPECTS(set.size() == sizes.size(), out_of_range, who, ": set of ", set.size(),
                     " tensors, but the host copy holds ", sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    OFFLOADKIT_EXPECTS(set[i].bytes == sizes[i], out_of_range, who, ": tensor ", i, " has ",
                       set[i].bytes, " bytes, but the host copy holds ", sizes[i]);
  }
}

}  // namespace detail
}  // namespace offloadkit::arena
