"""A graph-stable offload region in Python, on the executor's virtual-memory calls.

The address range is reserved once; physical memory is created, mapped and made accessible on
resume and unmapped and released on pause, so ``data`` never changes and graphs registered on the
region stay valid across pause and resume (no capture again). Contents travel through a pageable
host buffer while paused.

    offloadkit check --executor host --python examples/python/numpy_vmm_region.py:make
"""

import itertools

import offloadkit as ok


class NumpyVmmRegion(ok.Region):
    implementation = "numpy-vmm"
    capabilities = ok.BOTH_EXECUTORS | {"address_stable", "releases_memory", "multi_device"}

    def __init__(self, executor, config):
        ok.Region.check_config(executor, config)
        self.ex = executor
        self.size = config.bytes
        self.device = config.device
        granularity = executor.granularity(self.device)
        self.footprint = -(-config.bytes // granularity) * granularity
        self.va = executor.reserve(self.footprint, self.device)
        self.physical = None  # the mapped physical memory while active
        try:
            self._map()
        except BaseException:
            self.ex.unreserve(self.va, self.footprint)
            raise
        self.host = None  # the pageable copy while paused (None after a discard)
        self.state = "active"
        self.graphs = {}  # id -> graph, captured once on the stable address
        self.ids = itertools.count(1)
        self.captures = 0

    @property
    def data(self):
        return self.va

    def _map(self):
        physical = self.ex.create_physical(self.footprint, self.device)
        try:
            self.ex.map(self.va, self.footprint, physical)
            try:
                self.ex.set_access(self.va, self.footprint, self.device)
            except BaseException:
                self.ex.unmap(self.va, self.footprint)
                raise
        except BaseException:
            self.ex.release_physical(physical)
            raise
        self.physical = physical

    def _unmap(self):
        self.ex.unmap(self.va, self.footprint)
        self.ex.release_physical(self.physical)
        self.physical = None

    def pause(self, mode, stream):
        if mode == "discard":
            self.ex.synchronize(stream)
            host = None
        else:
            host = ok.host_copy(self.ex, self.va, self.size, stream)
        try:
            self._unmap()
        except BaseException:
            if host is not None:
                self.ex.deallocate(host)  # still active: the device memory is still mapped
            raise
        if self.host is not None:
            self.ex.deallocate(self.host)
        self.host = host
        self.state = "paused"

    def resume(self, stream):
        self._map()
        try:
            if self.host is not None:
                self.ex.copy(self.va, self.host, self.size, stream)
                self.ex.synchronize(stream)
        except BaseException:
            self._unmap()  # still paused: the host copy is untouched
            raise
        if self.host is not None:
            self.ex.deallocate(self.host)
            self.host = None
        self.state = "active"

    def register_graph(self, capture, stream):
        graph = ok.capture_graph(self.ex, capture, self.va, stream)
        gid = next(self.ids)
        self.graphs[gid] = graph
        self.captures += 1
        return gid

    def replay(self, graph_id, stream):
        if graph_id not in self.graphs:
            raise ok.OutOfRange(f"graph {graph_id} is not registered (registered: "
                                f"{sorted(self.graphs)})")
        self.ex.replay(self.graphs[graph_id], stream)

    def unregister_graph(self, graph_id):
        graph = self.graphs.pop(graph_id, None)
        if graph is not None:
            self.ex.destroy_graph(graph)

    def close(self):
        for graph in self.graphs.values():
            self.ex.destroy_graph(graph)
        self.graphs.clear()
        if self.physical is not None:
            self._unmap()
        if self.host is not None:
            self.ex.deallocate(self.host)
            self.host = None
        if self.va:
            self.ex.unreserve(self.va, self.footprint)
            self.va = 0


def make():
    return ok.Plugin(name="numpy-vmm-region", region=NumpyVmmRegion)
