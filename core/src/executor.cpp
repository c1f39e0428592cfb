// Names of the executor's enumerations, for messages and reports.
#include "offloadkit/executor.hpp"

namespace offloadkit {

const char* to_string(op_kind k) noexcept {
  switch (k) {
    case op_kind::allocate_device:
      return "allocate_device";
    case op_kind::allocate_pinned:
      return "allocate_pinned";
    case op_kind::allocate_pageable:
      return "allocate_pageable";
    case op_kind::copy:
      return "copy";
    case op_kind::fill:
      return "fill";
    case op_kind::launch:
      return "launch";
    case op_kind::host_function:
      return "host_function";
    case op_kind::record:
      return "record";
    case op_kind::wait:
      return "wait";
    case op_kind::reserve:
      return "reserve";
    case op_kind::create_physical:
      return "create_physical";
    case op_kind::map:
      return "map";
    case op_kind::unmap:
      return "unmap";
    case op_kind::set_access:
      return "set_access";
    case op_kind::begin_capture:
      return "begin_capture";
    case op_kind::end_capture:
      return "end_capture";
    case op_kind::replay:
      return "replay";
    case op_kind::allocate_managed:
      return "allocate_managed";
    case op_kind::prefetch:
      return "prefetch";
    case op_kind::count_:
      break;
  }
  return "unknown";
}

const char* to_string(memory_kind k) noexcept {
  switch (k) {
    case memory_kind::device:
      return "device";
    case memory_kind::pinned:
      return "pinned";
    case memory_kind::pageable:
      return "pageable";
  }
  return "unknown";
}

const char* to_string(pointer_kind k) noexcept {
  switch (k) {
    case pointer_kind::device:
      return "device";
    case pointer_kind::pinned:
      return "pinned";
    case pointer_kind::pageable:
      return "pageable";
    case pointer_kind::managed:
      return "managed";
  }
  return "unknown";
}

const char* to_string(backend b) noexcept { return b == backend::host ? "host" : "cuda"; }

op_kind allocation_op(memory_kind k) noexcept {
  switch (k) {
    case memory_kind::device:
      return op_kind::allocate_device;
    case memory_kind::pinned:
      return op_kind::allocate_pinned;
    case memory_kind::pageable:
      return op_kind::allocate_pageable;
  }
  return op_kind::allocate_device;
}

}  // namespace offloadkit
