// A plugin's paged stash behind stash_interface.
#include "host_common.hpp"
#include "stash_conversions.hpp"

namespace offloadkit::plugin {
namespace {

using detail::key_of;
using detail::key_to_c;
using detail::status_of;

class plugin_stash final : public stash::stash_interface {
 public:
  plugin_stash(std::shared_ptr<const library> lib, executor& ex, const stash::stash_config& cfg,
               stream_ref s)
      : obj_(std::move(lib), ex, "stash"), t_(obj_.lib->description().stash), cfg_(cfg) {
    // A stash that validates its config at first use is handed any config: what it reports, and
    // when, is what the battery checks.
    if (stash_capabilities_of(t_->capabilities).validation !=
        testing::stash_config_validation::first_use) {
      stash::check_config(cfg, ex.device_count());
    }
    okit_stash_config c{};
    c.row_bytes = cfg.row_bytes;
    c.rows_per_page = cfg.rows_per_page;
    c.max_rows = cfg.max_rows;
    c.device_pages = cfg.device_pages;
    c.pinned_pages = cfg.pinned_pages;
    c.max_keys = cfg.max_keys;
    c.device = cfg.device;
    call_checked(obj_.context, "create", t_->create, obj_.table.get(), &c, &obj_.self, to_c(s));
    obj_.set_teardown(*t_, OKIT_STASH_HAS(t_, close));
    name_ = detail::implementation_name(*obj_.lib, t_->implementation);
  }

 private:
  [[nodiscard]] std::string do_name() const override { return name_; }
  [[nodiscard]] const stash::stash_config& do_config() const noexcept override { return cfg_; }
  [[nodiscard]] bool do_capturable() const noexcept override {
    return stash_capabilities_of(t_->capabilities).capturable;
  }
  void do_stash(const stash::stash_key& key, const void* src, const std::uint64_t* rows,
                stream_ref s) override {
    call_checked_self(obj_.context, "stash", t_->stash, obj_.self, key_to_c(key), src, rows,
                      to_c(s));
  }
  void do_restore(const stash::stash_key& key, void* dst, std::uint64_t* rows_out,
                  stream_ref s) override {
    call_checked_self(obj_.context, "restore", t_->restore, obj_.self, key_to_c(key), dst, rows_out,
                      to_c(s));
  }
  // A table without the batch entries (older, or a plugin that has none) gets per-key calls.
  void do_stash_batch(const stash::stash_item* items, std::size_t n, stream_ref s) override {
    if (!OKIT_STASH_HAS(t_, stash_batch)) {
      stash_interface::do_stash_batch(items, n, s);
      return;
    }
    std::vector<okit_stash_item> c(n);
    for (std::size_t i = 0; i < n; ++i) {
      c[i] = okit_stash_item{key_to_c(items[i].key), items[i].src, items[i].rows};
    }
    call_checked_self(obj_.context, "stash_batch", t_->stash_batch, obj_.self, c.data(), n,
                      to_c(s));
  }
  void do_restore_batch(const stash::restore_item* items, std::size_t n, stream_ref s) override {
    if (!OKIT_STASH_HAS(t_, restore_batch)) {
      stash_interface::do_restore_batch(items, n, s);
      return;
    }
    std::vector<okit_restore_item> c(n);
    for (std::size_t i = 0; i < n; ++i) {
      c[i] = okit_restore_item{key_to_c(items[i].key), items[i].dst, items[i].rows_out};
    }
    call_checked_self(obj_.context, "restore_batch", t_->restore_batch, obj_.self, c.data(), n,
                      to_c(s));
  }
  void do_reset(stream_ref s) override {
    call_checked_self(obj_.context, "reset", t_->reset, obj_.self, to_c(s));
  }
  void do_clear_status(stream_ref s) override {
    call_checked_self(obj_.context, "clear_status", t_->clear_status, obj_.self, to_c(s));
  }
  stash::stash_snapshot do_snapshot(stream_ref s) override {
    okit_stash_snapshot c{};
    call_checked_self(obj_.context, "snapshot", t_->snapshot, obj_.self, &c, to_c(s));
    stash::stash_snapshot snap;
    snap.status = status_of(c.status);
    snap.free.device = c.free_device;
    snap.free.pinned = c.free_pinned;
    if (c.free_ids != nullptr) snap.free_ids.assign(c.free_ids, c.free_ids + c.free_id_count);
    for (std::size_t i = 0; c.entries != nullptr && i < c.entry_count; ++i) {
      const okit_stash_entry& e = c.entries[i];
      stash::entry_view v;
      v.key = key_of(e.key);
      v.rows = e.rows;
      v.device_pages = e.device_pages;
      v.pinned_pages = e.pinned_pages;
      if (e.page_ids != nullptr) v.page_ids.assign(e.page_ids, e.page_ids + e.page_id_count);
      snap.entries.push_back(std::move(v));
    }
    return snap;
  }

  detail::plugin_object obj_;
  const okit_stash_vtable* t_;
  stash::stash_config cfg_;
  std::string name_;
};

}  // namespace

std::optional<testing::stash_implementation> stash_of(const std::shared_ptr<const library>& lib) {
  const okit_stash_vtable* t = lib->description().stash;
  if (t == nullptr) return std::nullopt;
  testing::stash_implementation impl;
  impl.name = detail::implementation_name(*lib, t->implementation);
  impl.caps = stash_capabilities_of(*t);
  impl.support = support_of(t->capabilities);
  impl.make = [lib](executor& ex, const stash::stash_config& c, stream_ref s) {
    return std::unique_ptr<stash::stash_interface>(std::make_unique<plugin_stash>(lib, ex, c, s));
  };
  return impl;
}

}  // namespace offloadkit::plugin
