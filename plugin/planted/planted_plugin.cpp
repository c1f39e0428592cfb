// Planted-bug plugins: offloadkit's reference implementations behind the C ABI with one bug each,
// selected at build time by OFFLOADKIT_PLANTED (stash, region, arena, activation, crash). Each
// must make `offloadkit check --plugin` fail with a seed and a reproduce line; `crash` kills the
// process inside one stash property, which must cost one failure row, not the run: its correct
// arena is checked afterwards and passes.
#include <csignal>

#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/plugin/export.hpp"
#include "offloadkit/region/reference_region.hpp"
#include "offloadkit/stash/eager_stash.hpp"

namespace {

namespace ok = offloadkit;

#define OKIT_PLANTED_stash 1
#define OKIT_PLANTED_region 2
#define OKIT_PLANTED_arena 3
#define OKIT_PLANTED_activation 4
#define OKIT_PLANTED_crash 5
#define OKIT_PLANTED_PASTE(x) OKIT_PLANTED_##x
#define OKIT_PLANTED_OF(x) OKIT_PLANTED_PASTE(x)
#define PLANTED OKIT_PLANTED_OF(OFFLOADKIT_PLANTED)

constexpr std::uint64_t common =
    OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR | OKIT_CAP_EXECUTOR_ALLOCATIONS;

/// The reference stash, with restore() writing a zero over the first restored byte (stash) or with
/// clear_status() dying of SIGSEGV (crash).
class planted_stash final : public ok::stash::stash_interface {
 public:
  planted_stash(ok::executor& ex, const ok::stash::stash_config& c, ok::stream_ref s)
      : ex_(&ex), inner_(ex, c, s) {}

 private:
  [[nodiscard]] std::string do_name() const override { return "planted"; }
  [[nodiscard]] const ok::stash::stash_config& do_config() const noexcept override {
    return inner_.config();
  }
  [[nodiscard]] bool do_capturable() const noexcept override { return false; }
  void do_stash(const ok::stash::stash_key& k, const void* src, const std::uint64_t* rows,
                ok::stream_ref s) override {
    inner_.stash(k, src, rows, s);
  }
  void do_restore(const ok::stash::stash_key& k, void* dst, std::uint64_t* rows_out,
                  ok::stream_ref s) override {
    inner_.restore(k, dst, rows_out, s);
    if (PLANTED == OKIT_PLANTED_stash) ex_->fill(dst, 0, 1, s);  // the planted bug
  }
  void do_reset(ok::stream_ref s) override { inner_.reset(s); }
  void do_clear_status(ok::stream_ref s) override {
    if (PLANTED == OKIT_PLANTED_crash) std::raise(SIGSEGV);  // the planted crash
    inner_.clear_status(s);
  }
  ok::stash::stash_snapshot do_snapshot(ok::stream_ref s) override { return inner_.snapshot(s); }

  ok::executor* ex_;
  ok::stash::eager_stash inner_;
};

/// The reference region, with resume() losing the first byte of the contents.
class planted_region final : public ok::region::offload_region {
 public:
  planted_region(ok::executor& ex, const ok::region::region_config& c) : ex_(&ex), inner_(ex, c) {}

 private:
  [[nodiscard]] void* do_data() const noexcept override { return inner_.data(); }
  [[nodiscard]] std::size_t do_size() const noexcept override { return inner_.size(); }
  [[nodiscard]] int do_device() const noexcept override { return inner_.device(); }
  [[nodiscard]] ok::region::region_state do_state() const noexcept override {
    return inner_.state();
  }
  [[nodiscard]] bool do_address_stable() const noexcept override { return inner_.address_stable(); }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return inner_.footprint(); }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return inner_.captures(); }
  void do_pause(ok::stream_ref s, ok::region::pause_mode m) override { inner_.pause(s, m); }
  void do_resume(ok::stream_ref s) override {
    inner_.resume(s);
    ex_->fill(inner_.data(), 0x5a, 1, s);  // the planted bug
  }
  ok::region::graph_id do_register_graph(ok::region::capture_fn fn, ok::stream_ref s) override {
    return inner_.register_graph(std::move(fn), s);
  }
  void do_replay(ok::region::graph_id g, ok::stream_ref s) override { inner_.replay(g, s); }
  void do_unregister_graph(ok::region::graph_id g) noexcept override { inner_.unregister_graph(g); }

  ok::executor* ex_;
  ok::region::reference_region inner_;
};

/// The reference arena, with reload() writing a wrong first byte into the first non-empty tensor.
class planted_arena final : public ok::arena::offloader {
 public:
  explicit planted_arena(ok::executor& ex) : ex_(&ex), inner_(ex) {}

 private:
  ok::event do_offload(ok::arena::tensor_set_view set, ok::stream_ref s) override {
    return inner_.offload(set, s);
  }
  ok::event do_reload(ok::arena::tensor_set_view set, ok::stream_ref s) override {
    ok::event e = inner_.reload(set, s);
    for (const auto& t : set) {
      if (t.bytes == 0) continue;
      if (PLANTED != OKIT_PLANTED_arena) break;
      ex_->fill(t.data, 0x5a, 1, s);  // the planted bug
      ok::event after(*ex_);
      ex_->record(after, s);
      return after;
    }
    return e;
  }
  void do_release() noexcept override { inner_.release(); }
  [[nodiscard]] bool do_released() const noexcept override { return inner_.released(); }
  [[nodiscard]] bool do_holds_copy() const noexcept override { return inner_.holds_copy(); }
  [[nodiscard]] std::size_t do_host_bytes() const noexcept override { return inner_.host_bytes(); }
  [[nodiscard]] ok::arena::offload_promises do_promises() const noexcept override {
    return inner_.promises();
  }
  [[nodiscard]] std::string do_name() const override { return "planted"; }

  ok::executor* ex_;
  ok::arena::reference_offloader inner_;
};

/// The reference activation offloader, with unpack() writing a wrong first byte.
class planted_activation final : public ok::activation::offloader {
 public:
  planted_activation(ok::executor& ex, const ok::activation::offload_options& o)
      : ex_(&ex), inner_(ex, o) {}

 private:
  ok::activation::handle do_pack(ok::activation::tensor t, ok::stream_ref s) override {
    return inner_.pack(std::move(t), s);
  }
  ok::activation::tensor do_unpack(ok::activation::handle h, ok::stream_ref s) override {
    ok::activation::tensor t = inner_.unpack(h, s);
    if (t.bytes > 0) ex_->fill(t.data, 0x5a, 1, s);  // the planted bug
    return t;
  }
  void do_forward_layer_end(int layer, ok::stream_ref s) override {
    inner_.forward_layer_end(layer, s);
  }
  void do_backward_layer_begin(int layer, ok::stream_ref s) override {
    inner_.backward_layer_begin(layer, s);
  }
  void do_synchronize() override { inner_.synchronize(); }
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override {
    return inner_.keep_threshold();
  }
  [[nodiscard]] ok::activation::offload_stats do_stats() const override { return inner_.stats(); }
  [[nodiscard]] std::string do_name() const override { return "planted"; }

  ok::executor* ex_;
  ok::activation::reference_offloader inner_;
};

}  // namespace

extern "C" OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  namespace op = offloadkit::plugin;
  static const okit_stash_vtable stash =
      op::stash_vtable<&op::make_stash_as<planted_stash>>("planted", common);
  static const okit_region_vtable region = op::region_vtable<&op::make_region_as<planted_region>>(
      "planted", common | OKIT_REGION_CAP_RELEASES_MEMORY | OKIT_REGION_CAP_MULTI_DEVICE);
  static const okit_arena_vtable arena =
      op::arena_vtable<&op::make_arena_as<planted_arena>>("planted", common);
  static const okit_activation_vtable activation =
      op::activation_vtable<&op::make_activation_as<planted_activation>>(
          "planted", common | OKIT_ACTIVATION_CAP_ORIGIN_DEVICE |
                         OKIT_ACTIVATION_CAP_PREFETCH_BOUND | OKIT_ACTIVATION_CAP_PENDING_BOUND);
  const bool stash_like = PLANTED == OKIT_PLANTED_stash || PLANTED == OKIT_PLANTED_crash;
  static const okit_plugin plugin{
      OKIT_ABI_VERSION, sizeof(okit_plugin), "planted-" OKIT_PLANTED_NAME, OFFLOADKIT_VERSION,
      stash_like ? &stash : nullptr, PLANTED == OKIT_PLANTED_region ? &region : nullptr,
      // crash also carries a correct arena: its properties run after the crash and pass.
      PLANTED == OKIT_PLANTED_arena || PLANTED == OKIT_PLANTED_crash ? &arena : nullptr,
      PLANTED == OKIT_PLANTED_activation ? &activation : nullptr};
  return host_abi_version == OKIT_ABI_VERSION ? &plugin : nullptr;
}
