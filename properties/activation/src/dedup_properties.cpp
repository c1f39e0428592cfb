// Storage dedup: a storage packed twice while held is offloaded once.
#include "activation_properties.hpp"

namespace offloadkit::activation::testing {

// ---- storage dedup -----------------------------------------------------------------------------

/// For an implementation that declares dedup_by_storage: random packs of a few device storages
/// (1 to 65536 bytes), one storage packed again while earlier packs of it are held, with
/// synchronizations and layer ends between, then every handle unpacked in backward order. A pack
/// of a storage that an earlier pack still holds (its source not handed back) adds nothing to
/// offloaded_bytes, any other adds its bytes (under an opaque predicate, one reported kept adds
/// nothing); every handle unpacks to what its storage held when it was packed; each pack's source
/// is handed back exactly once, and the owner rewrites a storage (new contents, packed anew) only
/// once every pack of it has been handed back, so that a copy shared past that point is caught.
void storage_dedup(executor& ex, const activation_implementation& impl) {
  using rc::gen::inRange;
  offload_options o;
  o.keep_threshold = 0;
  o.max_pending_bytes = *rc::gen::element<std::size_t>(0, 0, 0, 4096);
  o.prefetch_bytes = *rc::gen::element<std::size_t>(0, 65536, std::size_t{1} << 30);
  o.prefetch_layers = *inRange(0, 3);
  struct storage {
    buffer mem;
    std::size_t bytes = 0;
    int value = 0;
    int held = 0;  ///< packs of it not handed back
  };
  std::vector<storage> storages;
  const int n_storages = *rc::gen::resize(100, inRange(1, 4));
  for (int k = 0; k < n_storages; ++k) {
    const std::size_t bytes = *rc::gen::element<std::size_t>(1, 64, 4096, 65536);
    storages.push_back({buffer(ex, memory_kind::device, bytes), bytes, 0, 0});
  }
  stream s(ex);
  buffer check(ex, memory_kind::pinned, 65536);
  const offloadkit::testing::sync_on_exit drain(ex, {s});
  struct pack_record {
    std::size_t storage = 0;
    int value = 0;
    int layer = 0;
    handle h;
    std::shared_ptr<int> released = std::make_shared<int>(0);
  };
  std::vector<pack_record> packs;
  std::ostringstream log;  // the calls, for the failure message
  int next_value = 1;
  {
    auto off = impl.make(ex, o);
    int layer = 0;
    const int steps = *rc::gen::resize(100, inRange(1, 24));
    for (int step = 0; step < steps; ++step) {
      const int op = *rc::gen::element(0, 0, 0, 0, 1, 2);
      if (op == 1) {
        off->synchronize();
        log << " sync";
        continue;
      }
      if (op == 2) {
        off->forward_layer_end(layer++, s);
        log << " end" << layer - 1;
        continue;
      }
      const auto k = *rc::gen::inRange<std::size_t>(0, storages.size());
      storage& st = storages[k];
      if (st.held == 0) {  // the owner's again: new contents
        st.value = next_value++ % 250 + 1;
        ex.fill(st.mem.data(), st.value, st.bytes, s);
      }
      // Shared: an earlier pack of this storage still holds it.
      const bool shared = st.held > 0;
      pack_record r;
      r.storage = k;
      r.value = st.value;
      r.layer = layer;
      tensor t;
      t.data = st.mem.data();
      t.bytes = st.bytes;
      t.shape = {static_cast<std::int64_t>(st.bytes)};
      t.release = [&ex, &s, &st, released = r.released] {
        ++*released;
        if (--st.held == 0) ex.fill(st.mem.data(), 0xEE, st.bytes, s);  // reused at once
      };
      const offload_stats before = off->stats();
      st.held += 1;
      r.h = off->pack(std::move(t), s);
      bool kept = false;
      std::string wrong = reported_decision(before, off->stats(), st.bytes, shared, kept);
      if (wrong.empty() && kept && !reports_decisions(impl)) {
        wrong = "a tensor of " + std::to_string(st.bytes) + " bytes was kept at keep_threshold 0";
      }
      log << " pack(storage " << k << ", " << st.bytes << " bytes, value " << r.value
          << (shared ? ", shared" : "") << ")";
      if (!wrong.empty())
        RC_FAIL("pack " + std::to_string(packs.size()) + ": " + wrong + ";" + log.str());
      packs.push_back(r);
    }
    for (std::size_t j = packs.size(); j-- > 0;) {
      const pack_record& r = packs[j];
      if (j + 1 == packs.size() || packs[j + 1].layer != r.layer) {
        off->backward_layer_begin(r.layer, s);
      }
      tensor back = off->unpack(r.h, s);
      const std::size_t bytes = storages[r.storage].bytes;
      if (back.bytes != bytes) {
        RC_FAIL(offloadkit::detail::concat("pack ", j, " came back with ", back.bytes,
                                           " bytes, packed ", bytes, ";", log.str()));
      }
      ex.copy(check.data(), back.data, bytes, s);
      ex.synchronize(s);
      const auto* got = check.as<unsigned char>();
      for (std::size_t b = 0; b < bytes; ++b) {
        if (got[b] != static_cast<unsigned char>(r.value)) {
          RC_FAIL(offloadkit::detail::concat("pack ", j, " (storage ", r.storage, "): byte ", b,
                                             " of ", bytes, " is ", int(got[b]), ", expected ",
                                             r.value, " (0xee: the owner's reuse);", log.str()));
        }
      }
      if (back.release) back.release();
    }
    off->synchronize();
  }
  ex.synchronize(s);
  for (std::size_t j = 0; j < packs.size(); ++j) {
    if (*packs[j].released != 1) {
      RC_FAIL(offloadkit::detail::concat("pack ", j, " (storage ", packs[j].storage,
                                         ")'s source was handed back ", *packs[j].released,
                                         " times, not once;", log.str()));
    }
  }
}

}  // namespace offloadkit::activation::testing
