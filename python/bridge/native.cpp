// The bridge's native Python classes: Executor (the executor lent to a Python object, with the
// GIL released while each operation runs) and Release (a tensor's release callback), and the
// translation of offloadkit's C++ exceptions into the Python classes of offloadkit.errors.
#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "bridge.hpp"

namespace offloadkit::python_bridge {
namespace {

using namespace pybind11::literals;

memory_kind kind_of(const std::string& k) {
  if (k == "device") return memory_kind::device;
  if (k == "pinned") return memory_kind::pinned;
  if (k == "pageable") return memory_kind::pageable;
  OFFLOADKIT_FAIL(out_of_range, "memory kind '", k, "' is not one of device, pinned, pageable");
}

bool is_buffer(py::handle h) { return py::isinstance(h, names().buffer); }

}  // namespace

void* to_address(py::handle h) {
  if (PyLong_Check(h.ptr())) {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(h.cast<std::uint64_t>()));
  }
  if (is_buffer(h)) {
    return reinterpret_cast<void*>(
        static_cast<std::uintptr_t>(h.attr("ptr").cast<std::uint64_t>()));
  }
  return reinterpret_cast<void*>(
      static_cast<std::uintptr_t>(names().support.attr("address_of")(h).cast<std::uint64_t>()));
}

namespace {

/// The address of `h` for an operation on `bytes` bytes of it: a Buffer smaller than that is an
/// OutOfRange here, before it can overrun anything.
void* to_extent(py::handle h, std::size_t bytes, const char* role) {
  if (is_buffer(h)) {
    const auto size = h.attr("nbytes").cast<std::size_t>();
    OFFLOADKIT_EXPECTS(bytes <= size, out_of_range, role, ": ", bytes,
                       " bytes is outside the buffer's [0, ", size, "] bytes");
  }
  return to_address(h);
}

std::uintptr_t to_handle(py::handle h) { return h.cast<std::uintptr_t>(); }

int device_of(py::handle h) { return py::hasattr(h, "device") ? h.attr("device").cast<int>() : 0; }

}  // namespace

stream_ref to_stream(py::handle h) {
  return stream_ref{reinterpret_cast<void*>(to_handle(h)), device_of(h)};
}

py::object make_event(event_ref e) {
  return names().event(reinterpret_cast<std::uintptr_t>(e.native), e.device);
}

py::object key_to_python(const stash::stash_key& k) {
  return names().stash_key(k.vp, k.layer, k.microbatch);
}

namespace {

event_ref to_event(py::handle h) {
  return event_ref{reinterpret_cast<void*>(to_handle(h)), device_of(h)};
}

/// Sets the Python error for an offloadkit C++ exception: the class of offloadkit.errors it
/// stands for (the inverse of offloadkit._bridge.error_code).
void translate(std::exception_ptr p) {
  const python_names& n = names();
  try {
    std::rethrow_exception(std::move(p));
  } catch (const injected_fault& e) {
    PyErr_SetString(n.injected_fault.ptr(), e.what());
  } catch (const cuda_error& e) {
    py::object error = n.cuda_error(e.what(), e.code());
    PyErr_SetObject(n.cuda_error.ptr(), error.ptr());
  } catch (const runtime_error& e) {
    PyErr_SetString(n.platform_error.ptr(), e.what());
  } catch (const bad_alloc& e) {  // out_of_memory among them
    PyErr_SetString(n.out_of_memory.ptr(), e.what());
  } catch (const state_error& e) {
    PyErr_SetString(n.state_error.ptr(), e.what());
  } catch (const out_of_range& e) {
    PyErr_SetString(n.out_of_range.ptr(), e.what());
  } catch (const logic_error& e) {
    PyErr_SetString(n.logic_error.ptr(), e.what());
  }
  // Anything else propagates to pybind11's own translation (std::bad_alloc: MemoryError, ...).
}

}  // namespace

executor& executor_handle::get() const {
  OFFLOADKIT_EXPECTS(ex != nullptr, state_error,
                     "this executor was lent to a Python object that has been destroyed; use the "
                     "executor given to the object that is calling");
  return *ex;
}

py::object make_executor(const std::shared_ptr<executor_handle>& h) { return py::cast(h); }

py::object make_stream(stream_ref s) {
  return names().stream(reinterpret_cast<std::uintptr_t>(s.native), s.device);
}

py::object make_buffer(const void* p, std::size_t bytes, int device, memory_kind kind, backend b,
                       std::optional<stream_ref> s) {
  return names().buffer(reinterpret_cast<std::uintptr_t>(p), bytes, to_string(kind), device,
                        to_string(b), s ? make_stream(*s) : py::none());
}

py::object make_release(const std::shared_ptr<release_once>& r) { return py::cast(r); }

std::shared_ptr<py::object> held_callable(py::object fn) {
  return {new py::object(std::move(fn)), [](py::object* o) {
            py::gil_scoped_acquire gil;
            delete o;
          }};
}

py::object tensor_to_python(const activation::tensor& t, backend b, stream_ref s,
                            const std::shared_ptr<release_once>& release) {
  py::list shape;
  for (std::int64_t x : t.shape) shape.append(x);
  return names().tensor(make_buffer(t.data, t.bytes, t.device, memory_kind::device, b, s), t.bytes,
                        t.device, activation::to_string(t.type), shape, make_release(release));
}

activation::tensor tensor_from_python(py::handle tensor, std::string release_what,
                                      std::shared_ptr<pending_errors> pending) {
  const py::tuple u = names().support.attr("unpacked")(tensor);
  activation::tensor t;
  t.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(u[0].cast<std::uint64_t>()));
  t.bytes = u[1].cast<std::size_t>();
  t.device = u[2].cast<int>();
  t.type = static_cast<activation::dtype>(u[3].cast<int>());
  t.shape = u[4].cast<std::vector<std::int64_t>>();
  if (!u[5].is_none()) {
    t.release = python_callback(py::reinterpret_borrow<py::object>(u[5]), std::move(release_what),
                                std::move(pending));
  }
  return t;
}

std::function<void()> python_callback(py::object fn, std::string what,
                                      std::shared_ptr<pending_errors> pending) {
  std::shared_ptr<py::object> held = held_callable(std::move(fn));
  return [held, what = std::move(what), pending = std::move(pending)] {
    py::gil_scoped_acquire gil;
    try {
      (*held)();
    } catch (py::error_already_set& e) {
      pending->store(describe_python_error(what, e));
    }
  };
}

void create_native_module() {
  // Defined at run time, once the factory is loaded, in the interpreter that imported
  // offloadkit._native.
  static PyModuleDef def{};
  py::module_ m = py::module_::create_extension_module(
      "_offloadkit_bridge", "offloadkit's Python bridge: the native side of offloadkit.protocol",
      &def);
  py::module_::import("sys").attr("modules")["_offloadkit_bridge"] = m;
  py::register_local_exception_translator(&translate);

  py::class_<release_once, std::shared_ptr<release_once>>(m, "Release", py::module_local(),
                                                          "A tensor's release callback: call it "
                                                          "exactly once")
      .def("__call__", [](release_once& r) {
        std::function<void()> fn;
        {
          std::lock_guard<std::mutex> lock(r.mutex);
          OFFLOADKIT_EXPECTS(!r.disowned, state_error,
                             "release(): pack() failed, so the tensor was never handed over and "
                             "its buffer still belongs to the caller");
          OFFLOADKIT_EXPECTS(!r.called, state_error,
                             "release() called a second time: a tensor is given back exactly once");
          r.called = true;
          fn = std::move(r.fn);
        }
        py::gil_scoped_release nogil;
        if (fn) fn();
      });

  using H = executor_handle;
  auto nogil = [](auto&& f) {
    py::gil_scoped_release release;
    return f();
  };
  py::class_<H, std::shared_ptr<H>>(m, "Executor", py::module_local(),
                                    "The executor offloadkit lends to a Python object (see "
                                    "offloadkit.protocol); valid while that object lives")
      .def_property_readonly("backend", [](const H& h) { return to_string(h.kind); })
      .def_property_readonly("name", [](const H& h) { return h.get().name(); })
      .def_property_readonly("device_count", [](const H& h) { return h.get().device_count(); })
      .def(
          "allocate",
          [nogil](const H& h, std::size_t nbytes, const std::string& kind, int device) {
            const memory_kind k = kind_of(kind);
            executor& ex = h.get();
            void* p = nogil([&] { return ex.allocate(k, nbytes, device); });
            return make_buffer(p, nbytes, k == memory_kind::device ? device : 0, k, h.kind, {});
          },
          "nbytes"_a, "kind"_a = "device", "device"_a = 0)
      .def(
          "deallocate",
          [nogil](const H& h, const py::object& buffer) {
            OFFLOADKIT_EXPECTS(is_buffer(buffer), logic_error,
                               "deallocate takes the Buffer that allocate returned, got ",
                               py::repr(buffer).cast<std::string>());
            void* p = to_address(buffer);
            OFFLOADKIT_EXPECTS(p != nullptr, state_error,
                               "deallocate: ", py::repr(buffer).cast<std::string>(),
                               " was already deallocated");
            const memory_kind k = kind_of(buffer.attr("kind").cast<std::string>());
            const auto bytes = buffer.attr("nbytes").cast<std::size_t>();
            executor& ex = h.get();
            nogil([&] { ex.deallocate(k, p, bytes); });
            // A second deallocate of the same Buffer is then a clear error, not a double free.
            buffer.attr("ptr") = 0;
          },
          "buffer"_a)
      .def("classify",
           [nogil](const H& h, py::handle address) {
             const void* p = to_address(address);
             executor& ex = h.get();
             const pointer_info i = nogil([&] { return ex.classify(p); });
             return py::make_tuple(to_string(i.kind), i.device);
           })
      .def("extent_of",
           [nogil](const H& h, py::handle address) {
             const void* p = to_address(address);
             executor& ex = h.get();
             const allocation_extent e = nogil([&] { return ex.extent_of(p); });
             return py::make_tuple(reinterpret_cast<std::uintptr_t>(e.base), e.bytes);
           })
      .def(
          "device_memory",
          [nogil](const H& h, int device) {
            executor& ex = h.get();
            const memory_info m = nogil([&] { return ex.device_memory(device); });
            return py::make_tuple(m.free, m.total);
          },
          "device"_a = 0)
      .def(
          "create_stream",
          [nogil](const H& h, int device) {
            executor& ex = h.get();
            return make_stream(nogil([&] { return ex.create_stream(device); }));
          },
          "device"_a = 0)
      .def("destroy_stream",
           [nogil](const H& h, py::handle s) {
             const stream_ref r = to_stream(s);
             executor& ex = h.get();
             nogil([&] { ex.destroy_stream(r); });
           })
      .def(
          "create_event",
          [nogil](const H& h, int device) {
            executor& ex = h.get();
            return make_event(nogil([&] { return ex.create_event(device); }));
          },
          "device"_a = 0)
      .def("destroy_event",
           [nogil](const H& h, py::handle e) {
             const event_ref r = to_event(e);
             executor& ex = h.get();
             nogil([&] { ex.destroy_event(r); });
           })
      .def(
          "copy",
          [nogil](const H& h, py::handle dst, py::handle src, std::size_t nbytes, py::handle s) {
            void* d = to_extent(dst, nbytes, "copy destination");
            const void* from = to_extent(src, nbytes, "copy source");
            const stream_ref r = to_stream(s);
            executor& ex = h.get();
            nogil([&] { ex.copy(d, from, nbytes, r); });
          },
          "dst"_a, "src"_a, "nbytes"_a, "stream"_a)
      .def(
          "fill",
          [nogil](const H& h, py::handle dst, int value, std::size_t nbytes, py::handle s) {
            void* d = to_extent(dst, nbytes, "fill destination");
            const stream_ref r = to_stream(s);
            executor& ex = h.get();
            nogil([&] { ex.fill(d, value, nbytes, r); });
          },
          "dst"_a, "value"_a, "nbytes"_a, "stream"_a)
      .def("record",
           [nogil](const H& h, py::handle e, py::handle s) {
             const event_ref er = to_event(e);
             const stream_ref sr = to_stream(s);
             executor& ex = h.get();
             nogil([&] { ex.record(er, sr); });
           })
      .def("wait",
           [nogil](const H& h, py::handle e, py::handle s) {
             const event_ref er = to_event(e);
             const stream_ref sr = to_stream(s);
             executor& ex = h.get();
             nogil([&] { ex.wait(er, sr); });
           })
      .def("synchronize",
           [nogil](const H& h, py::handle stream_or_event) {
             executor& ex = h.get();
             if (py::isinstance(stream_or_event, names().event)) {
               const event_ref e = to_event(stream_or_event);
               nogil([&] { ex.synchronize(e); });
             } else {
               const stream_ref s = to_stream(stream_or_event);
               nogil([&] { ex.synchronize(s); });
             }
           })
      .def("ready",
           [nogil](const H& h, py::handle e) {
             const event_ref er = to_event(e);
             executor& ex = h.get();
             return nogil([&] { return ex.ready(er); });
           })
      .def("begin_capture",
           [nogil](const H& h, py::handle s) {
             const stream_ref sr = to_stream(s);
             executor& ex = h.get();
             nogil([&] { ex.begin_capture(sr); });
           })
      .def("end_capture",
           [nogil](const H& h, py::handle s) {
             const stream_ref sr = to_stream(s);
             executor& ex = h.get();
             const graph_ref g = nogil([&] { return ex.end_capture(sr); });
             return names().graph(reinterpret_cast<std::uintptr_t>(g.native));
           })
      .def("replay",
           [nogil](const H& h, py::handle g, py::handle s) {
             const graph_ref gr{reinterpret_cast<void*>(to_handle(g))};
             const stream_ref sr = to_stream(s);
             executor& ex = h.get();
             nogil([&] { ex.replay(gr, sr); });
           })
      .def("destroy_graph",
           [nogil](const H& h, py::handle g) {
             const graph_ref gr{reinterpret_cast<void*>(to_handle(g))};
             executor& ex = h.get();
             nogil([&] { ex.destroy_graph(gr); });
           })
      .def(
          "granularity",
          [nogil](const H& h, int device) {
            executor& ex = h.get();
            return nogil([&] { return ex.granularity(device); });
          },
          "device"_a = 0)
      .def(
          "reserve",
          [nogil](const H& h, std::size_t nbytes, int device) {
            executor& ex = h.get();
            return reinterpret_cast<std::uintptr_t>(
                nogil([&] { return ex.reserve(nbytes, device); }));
          },
          "nbytes"_a, "device"_a = 0)
      .def("unreserve",
           [nogil](const H& h, py::handle va, std::size_t nbytes) {
             void* p = to_address(va);
             executor& ex = h.get();
             nogil([&] { ex.unreserve(p, nbytes); });
           })
      .def(
          "create_physical",
          [nogil](const H& h, std::size_t nbytes, int device) {
            executor& ex = h.get();
            const physical_handle p = nogil([&] { return ex.create_physical(nbytes, device); });
            return names().physical(p.value, p.device, p.bytes);
          },
          "nbytes"_a, "device"_a = 0)
      .def("release_physical",
           [nogil](const H& h, py::handle p) {
             const physical_handle ph{p.attr("value").cast<std::uint64_t>(),
                                      p.attr("device").cast<int>(),
                                      p.attr("nbytes").cast<std::size_t>()};
             executor& ex = h.get();
             nogil([&] { ex.release_physical(ph); });
           })
      .def("map",
           [nogil](const H& h, py::handle va, std::size_t nbytes, py::handle p) {
             void* a = to_address(va);
             const physical_handle ph{p.attr("value").cast<std::uint64_t>(),
                                      p.attr("device").cast<int>(),
                                      p.attr("nbytes").cast<std::size_t>()};
             executor& ex = h.get();
             nogil([&] { ex.map(a, nbytes, ph); });
           })
      .def("unmap",
           [nogil](const H& h, py::handle va, std::size_t nbytes) {
             void* a = to_address(va);
             executor& ex = h.get();
             nogil([&] { ex.unmap(a, nbytes); });
           })
      .def(
          "set_access",
          [nogil](const H& h, py::handle va, std::size_t nbytes, int device) {
            void* a = to_address(va);
            executor& ex = h.get();
            nogil([&] { ex.set_access(a, nbytes, device); });
          },
          "va"_a, "nbytes"_a, "device"_a = 0)
      .def("__repr__", [](const H& h) {
        return std::string("<offloadkit executor (") + to_string(h.kind) +
               (h.ex == nullptr ? ", closed" : "") + ")>";
      });
}

}  // namespace offloadkit::python_bridge
