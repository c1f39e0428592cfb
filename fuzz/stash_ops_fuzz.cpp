// Fuzz target: arbitrary bytes are a pool configuration followed by freelist/stash/restore ops on
// the optimized paged stash (host executor), checked after every op against a plain model: pages
// conserved (none lost, none handed out twice), free counts, the sticky status word and every
// restored byte. The same interpreter runs as a ctest over a fixed corpus
// (fuzz/tests/stash_fuzz_corpus_test.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "offloadkit/detail/byte_reader.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/stash/paged_stash.hpp"
#include "offloadkit/stash/planner.hpp"
#include "offloadkit/testing/stash_battery_support.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::stash;

host_executor& fuzz_executor() {
  static host_executor ex(host_executor_options{1, std::size_t{1} << 30, std::size_t{2} << 20, 4});
  return ex;
}

}  // namespace

/// Runs one input; returns the first violated invariant, or an empty string.
std::string offloadkit_stash_ops_run(const std::uint8_t* data, std::size_t size) {
  using detail::concat;
  offloadkit::detail::byte_reader in{data, size};
  stash_config cfg;
  cfg.row_bytes = 1 + in.next() % 24;
  cfg.rows_per_page = 1 + in.next() % 6;
  cfg.max_rows = in.next() % 20;
  cfg.device_pages = in.next() % 8;
  cfg.pinned_pages = in.next() % 8;
  cfg.max_keys = 8;
  executor& ex = fuzz_executor();
  stream s(ex);
  paged_stash st(ex, cfg, s);
  stash::testing::device_io io(ex, s, cfg.max_rows * cfg.row_bytes);

  // The model: rows and (device, pinned) pages held per key, free counts, first failure.
  std::map<std::uint32_t, std::uint64_t> rows_of_key;
  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> pages_of_key;
  std::uint64_t free_dev = cfg.device_pages, free_pin = cfg.pinned_pages;
  status_code status = status_code::ok;
  stash_key status_key;
  std::uint32_t salt = 0;
  auto fail = [&](status_code c, const stash_key& k) {
    if (status == status_code::ok) {
      status = c;
      status_key = k;
    }
  };

  for (std::size_t op = 0; in.n > 0 && op < 64; ++op) {
    const std::uint8_t code = in.next();
    const stash_key key{0, static_cast<std::uint32_t>(code >> 5 & 1),
                        static_cast<std::uint32_t>(code >> 6 & 3)};
    const std::uint32_t kc = encode_key(key);
    switch (code % 5) {
      case 0:
      case 1: {  // stash
        const std::uint64_t rows = in.next() % (cfg.max_rows + 2);
        ++salt;
        io.write_u64(io.rows.data(), rows);
        io.write_source(io.src.data(), kc, salt);
        st.stash(key, io.src.data(), io.rows.as<std::uint64_t>(), s);
        const std::uint64_t need = pages_for(rows, cfg.rows_per_page);
        if (rows > cfg.max_rows) {
          fail(status_code::rows_too_large, key);
        } else if (rows_of_key.count(kc) != 0) {
          fail(status_code::double_stash, key);
        } else if (need > free_dev + free_pin) {
          fail(status_code::overflow, key);
        } else {
          const std::uint64_t d = std::min(need, free_dev);
          free_dev -= d;
          free_pin -= need - d;
          rows_of_key[kc] = rows;
          pages_of_key[kc] = {d, need - d};
          // Remember which salt the key's bytes were written with.
          rows_of_key[kc] |= std::uint64_t{salt} << 32;
        }
        break;
      }
      case 2: {  // restore
        io.clear(io.dst.data());
        st.restore(key, io.dst.data(), io.rows_out.as<std::uint64_t>(), s);
        auto it = rows_of_key.find(kc);
        if (it == rows_of_key.end()) {
          fail(status_code::restore_empty, key);
          if (stash::testing::first_mismatch(io.read(io.dst.data()), kc, 0, 0) != -1) {
            return concat("op ", op, ": restore of empty ", to_string(key), " wrote bytes");
          }
          break;
        }
        const std::uint64_t rows = it->second & 0xFFFFFFFFu;
        const auto key_salt = static_cast<std::uint32_t>(it->second >> 32);
        const long long bad = stash::testing::first_mismatch(io.read(io.dst.data()), kc, key_salt,
                                                             rows * cfg.row_bytes);
        if (bad != -1) return concat("op ", op, ": restore of ", to_string(key), " byte ", bad);
        if (io.read_u64(io.rows_out.data()) != rows) {
          return concat("op ", op, ": restore of ", to_string(key), " reported a wrong row count");
        }
        free_dev += pages_of_key[kc].first;
        free_pin += pages_of_key[kc].second;
        rows_of_key.erase(it);
        pages_of_key.erase(kc);
        break;
      }
      case 3:  // reset
        st.reset(s);
        rows_of_key.clear();
        pages_of_key.clear();
        free_dev = cfg.device_pages;
        free_pin = cfg.pinned_pages;
        status = status_code::ok;
        break;
      default:  // clear the status word
        st.clear_status(s);
        status = status_code::ok;
        break;
    }
    const stash_snapshot snap = st.snapshot(s);
    if (auto err = check_conservation(snap, cfg, true); !err.empty()) {
      return concat("op ", op, ": ", err);
    }
    if (snap.free.device != free_dev || snap.free.pinned != free_pin) {
      return concat("op ", op, ": free pages ", snap.free.device, " + ", snap.free.pinned,
                    ", model says ", free_dev, " + ", free_pin);
    }
    if (snap.status.code != status ||
        (status != status_code::ok && snap.status.key != status_key)) {
      return concat("op ", op, ": status '", snap.status.message(), "', model says ",
                    to_string(status), " for ", to_string(status_key));
    }
  }
  return {};
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string err = offloadkit_stash_ops_run(data, size);
  if (!err.empty()) {
    std::fprintf(stderr, "stash invariant violated: %s\n", err.c_str());
    std::abort();
  }
  return 0;
}
