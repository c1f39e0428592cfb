"""The tests' device memory for the library stand-ins (python/tests/adapters/standins): host memory
(ctypes buffers) that counts the bytes every copy moves in each direction, and loses the contents
of a range when it is unmapped, as releasing physical memory does. test_bench_peers.py binds it in
its own process, standin_worker.py in each peer's process."""

import ctypes

import offloadkit as ok


class HostMemory:
    """An executor of host memory for the stand-ins: allocations and reserved ranges are ctypes
    buffers; ``moved`` counts the bytes copied device to host ("d2h"), host to device ("h2d") and
    within either."""

    backend = "host"
    name = "host memory (tests)"
    device_count = 1

    def __init__(self):
        self.ranges = {}  # address -> (ctypes buffer, nbytes, kind)
        self.unmapped = set()
        self.moved = {"d2h": 0, "h2d": 0, "d2d": 0, "h2h": 0}
        self.streams = 0

    def _new(self, nbytes, kind):
        buf = ctypes.create_string_buffer(max(nbytes, 1))
        address = ctypes.addressof(buf)
        self.ranges[address] = (buf, nbytes, kind)
        return address

    def kind(self, address):
        for base, (_, nbytes, kind) in self.ranges.items():
            if base <= address < base + max(nbytes, 1):
                if base in self.unmapped:
                    raise RuntimeError(f"access to unmapped memory at {address:#x}")
                return kind
        raise RuntimeError(f"{address:#x} is no memory of this executor")

    def granularity(self, device=0):
        return 4096

    def allocate(self, nbytes, kind="device", device=0):
        return ok.Buffer(self._new(nbytes, kind), nbytes, kind, device, "host")

    def deallocate(self, buffer):
        del self.ranges[int(buffer)]

    def reserve(self, nbytes, device=0):
        address = self._new(nbytes, "device")
        self.unmapped.add(address)
        return address

    def unreserve(self, address, nbytes):
        del self.ranges[address]
        self.unmapped.discard(address)

    def create_physical(self, nbytes, device=0):
        return ok.Physical(1, device, nbytes)

    def release_physical(self, physical):
        pass

    def map(self, address, nbytes, physical):
        self.unmapped.discard(address)

    def unmap(self, address, nbytes):
        ctypes.memset(address, 0xEE, nbytes)  # the contents go with the physical memory
        self.unmapped.add(address)

    def set_access(self, address, nbytes, device=0):
        pass

    def copy(self, dst, src, nbytes, stream):
        way = ("d" if self.kind(int(src)) == "device" else "h") + "2" + (
            "d" if self.kind(int(dst)) == "device" else "h")
        ctypes.memmove(int(dst), int(src), nbytes)
        self.moved[way] += nbytes

    def fill(self, dst, value, nbytes, stream):
        ctypes.memset(int(dst), value, nbytes)

    def create_stream(self, device=0):
        self.streams += 1
        return ok.Stream(1000 + self.streams, device)

    def destroy_stream(self, stream):
        pass

    def synchronize(self, stream):
        pass
