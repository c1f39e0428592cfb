"""Stand-in of ``megatron.core.transformer.moe.paged_stash`` (tests only), after NVIDIA/Megatron-LM
commit d98e8a64ddf34856e74b24714e3bedb2f5a39553: the classes and functions offloadkit's adapter
drives (``PagedStashBuffer``, ``PagedTensor``, ``PagedStashManager``, ``get_paged_stash_context``,
``paged_stash_init_chunk_handler``, ``paged_stash_reset``, ``check_paged_stash_overflow``), their
code kept line for line where the adapter reaches it, over the torch stand-in. The two Triton
kernels (``ops/paged_stash.py``) are Python functions with the kernels' logic, run on the host
over the tensors' memory once the current stream is synchronized (one "program" does the whole
grid's work), launched as the kernels are: ``kernel[grid](...)``.

Not here: the autograd functions, ``PagedStashContext``, ``on_get_saved_tensor``, the capture
iteration's token accounting (``status == 'capture'``) and ``PagedStashRunner``.

Planted defect (tests only): with ``OFFLOADKIT_STANDIN_DEFECT=stashes_after_overflow`` in the
environment, the copy kernel does not return when the overflow flag is already set: a stash after
an overflow takes pages and stores its rows, which the sticky flag forbids.
"""

import logging
import os
from contextlib import nullcontext
from typing import Any

import torch

logger = logging.getLogger(__name__)

GLOBAL_BLOCK_SIZE = 1024
SCALE_INV_BLOCK_SIZE = 32


def _defect(name: str) -> bool:
    return os.environ.get("OFFLOADKIT_STANDIN_DEFECT") == name


class _Kernel:
    """``kernel[grid](*args, **constexprs)``: runs ``body`` once for the whole grid."""

    def __init__(self, body):
        self.body = body
        self.launches = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, kwargs))
            if grid[0] > 0:  # an empty grid launches nothing
                self.body(*args, **kwargs)
        return launch


def _copy(src, cuda_dst, host_dst, num_tokens_t, free_list_cuda, free_list_host, free_list_head,
          free_list_tail, free_list_capacity, page_record, overflow_t, host_spill_global,
          spilled_to_host, new_free_list_head, PAGE_SIZE, HIDDEN_SIZE, BLOCK_SIZE,
          HAS_HOST_BUFFER):
    overflow = overflow_t.numpy()
    num_tokens = int(num_tokens_t.numpy()[0])
    required_pages = -(-num_tokens // PAGE_SIZE)
    head = free_list_head.numpy()
    tail = free_list_tail.numpy()
    cap = free_list_capacity.numpy()
    out_head = new_free_list_head.numpy()
    head_cuda, head_host = int(head[0]), int(head[1])
    use_cuda = int(tail[0]) - head_cuda >= required_pages
    spill, dst, free_list, at, capacity = 0, cuda_dst, free_list_cuda, head_cuda, int(cap[0])
    new_head = [head_cuda + required_pages, head_host]
    if overflow[0] == 1 and not _defect("stashes_after_overflow"):
        out_head[:] = (head_cuda, head_host)
        return
    if not use_cuda:
        if HAS_HOST_BUFFER == 1 and int(tail[1]) - head_host >= required_pages:
            spill, dst, free_list, at, capacity = 1, host_dst, free_list_host, head_host, \
                int(cap[1])
            new_head = [head_cuda, head_host + required_pages]
        else:
            overflow[0] = 1
            spilled_to_host.numpy()[0] = 1
            out_head[:] = (head_cuda, head_host)
            return
    spilled_to_host.numpy()[0] = spill
    if spill == 1:
        host_spill_global.numpy()[0] = 1
    source = src.numpy().reshape(-1)
    target = dst.numpy().reshape(-1)
    ids = free_list.numpy()
    record = page_record.numpy()
    for token in range(num_tokens):
        slot, within = divmod(token, PAGE_SIZE)
        page = int(ids[(at + slot) % capacity])
        if within == 0:
            record[slot] = page
        to = (page * PAGE_SIZE + within) * HIDDEN_SIZE
        target[to:to + HIDDEN_SIZE] = source[token * HIDDEN_SIZE:(token + 1) * HIDDEN_SIZE]
    out_head[:] = new_head


def _pop(cuda_src, host_src, dst, num_tokens_t, page_record, spilled_to_host, overflow_t,
         free_list_cuda, free_list_host, free_list_tail, free_list_capacity, new_free_list_tail,
         PAGE_SIZE, HIDDEN_SIZE, BLOCK_SIZE):
    num_tokens = int(num_tokens_t.numpy()[0])
    spill = int(spilled_to_host.numpy()[0])
    required_pages = -(-num_tokens // PAGE_SIZE)
    tail = free_list_tail.numpy()
    cap = free_list_capacity.numpy()
    out_tail = new_free_list_tail.numpy()
    tail_cuda, tail_host = int(tail[0]), int(tail[1])
    if overflow_t.numpy()[0] == 1:
        out_tail[:] = (tail_cuda, tail_host)
        return
    src, free_list, at, capacity = cuda_src, free_list_cuda, tail_cuda, int(cap[0])
    new_tail = [tail_cuda + required_pages, tail_host]
    if spill == 1:
        if int(cap[1]) == 0:
            out_tail[:] = (tail_cuda, tail_host)
            return
        src, free_list, at, capacity = host_src, free_list_host, tail_host, int(cap[1])
        new_tail = [tail_cuda, tail_host + required_pages]
    source = src.numpy().reshape(-1)
    target = dst.numpy().reshape(-1)
    ids = free_list.numpy()
    record = page_record.numpy()
    for token in range(num_tokens):
        slot, within = divmod(token, PAGE_SIZE)
        page = int(record[slot])
        at_src = (page * PAGE_SIZE + within) * HIDDEN_SIZE
        target[token * HIDDEN_SIZE:(token + 1) * HIDDEN_SIZE] = \
            source[at_src:at_src + HIDDEN_SIZE]
        if within == 0:
            ids[(at + slot) % capacity] = page
    out_tail[:] = new_tail


paged_stash_copy_kernel = _Kernel(_copy)
paged_stash_pop_kernel = _Kernel(_pop)


def log_single_rank(log, level, msg):
    log.log(level, msg)


class PagedStashBuffer:
    """Megatron's ``PagedStashBuffer``: pages of a CUDA buffer and an optional pinned host buffer,
    two circular free lists of page ids on the device."""

    def __init__(self, num_tokens, hidden_size, page_size, device, overflow, host_spill, dtype,
                 num_tokens_host=0):
        self.hidden_size = hidden_size
        self.page_size = page_size
        self.device = device
        self.dtype = dtype
        self.overflow = overflow
        self.host_spill = host_spill
        self.num_cuda_pages = (num_tokens + page_size - 1) // page_size
        self.total_cuda_tokens = self.num_cuda_pages * page_size
        self.cuda_buffer = torch.empty(
            (self.total_cuda_tokens, hidden_size), dtype=dtype, device=device)
        self.num_host_pages = (
            (num_tokens_host + page_size - 1) // page_size if num_tokens_host > 0 else 0)
        self.total_host_tokens = self.num_host_pages * page_size if self.num_host_pages > 0 else 0
        if self.num_host_pages > 0:
            self.host_buffer = torch.empty(
                (self.total_host_tokens, hidden_size), dtype=dtype, device='cpu', pin_memory=True)
        else:
            self.host_buffer = None
        self.free_list_head = torch.zeros(2, dtype=torch.int64, device=device)
        self.free_list_tail = torch.tensor(
            [self.num_cuda_pages, self.num_host_pages], dtype=torch.int64, device=device)
        self.free_list_capacity = torch.tensor(
            [self.num_cuda_pages, self.num_host_pages], dtype=torch.int64, device=device)
        self.free_list_cuda = torch.arange(self.num_cuda_pages, dtype=torch.int64, device=device)
        if self.num_host_pages > 0:
            self.free_list_host = torch.arange(
                self.num_host_pages, dtype=torch.int64, device=device)
        else:
            self.free_list_host = torch.empty(0, dtype=torch.int64, device=device)
        self._reset_tail = torch.tensor(
            [self.num_cuda_pages, self.num_host_pages], dtype=torch.int64, device=device)
        self._reset_free_list_cuda = torch.arange(
            self.num_cuda_pages, dtype=torch.int64, device=device)
        if self.num_host_pages > 0:
            self._reset_free_list_host = torch.arange(
                self.num_host_pages, dtype=torch.int64, device=device)
        else:
            self._reset_free_list_host = None

    def reset(self):
        self.free_list_cuda.copy_(self._reset_free_list_cuda)
        self.free_list_head.zero_()
        self.free_list_tail.copy_(self._reset_tail)
        if self._reset_free_list_host is not None:
            self.free_list_host.copy_(self._reset_free_list_host)


class PagedTensor:
    """Megatron's ``PagedTensor``: one saved tensor's page record and spill flag."""

    def __init__(self, tensor, num_tokens_tensor=None, avg_num_tokens=None, vp_stage=None,
                 original_shape=None, schedule_layer_no=None, is_columnwise_scale_inv=None,
                 max_num_tokens=None, hidden_size=None, page_size=64):
        self._tensor = tensor
        self._original_tensor = None
        assert (num_tokens_tensor is not None and isinstance(num_tokens_tensor, torch.Tensor)
                and num_tokens_tensor.numel() == 1)
        self.num_tokens_tensor = num_tokens_tensor
        self.avg_num_tokens = avg_num_tokens
        self.vp_stage = vp_stage
        self.schedule_layer_no = schedule_layer_no
        self.is_columnwise_scale_inv = is_columnwise_scale_inv
        self.max_num_tokens = max_num_tokens
        self.hidden_size = hidden_size
        self.page_size = page_size
        self.original_shape = list(tensor.shape) if original_shape is None else original_shape
        self.element_size = tensor.element_size()
        self.dtype = tensor.dtype
        self.device = tensor.device
        self.max_num_pages = (self.max_num_tokens + page_size - 1) // page_size
        self.page_record = torch.empty(self.max_num_pages, dtype=torch.int64, device=self.device)
        self.spilled_to_host = torch.empty(1, dtype=torch.int64, device=self.device)

    def offload_to_stash(self, paged_stash_buffer, max_blocks=2048):
        self.page_record.zero_()
        self.spilled_to_host.zero_()
        self._tensor = self._tensor.contiguous()
        if self.num_tokens_tensor.dim() == 0:
            self.num_tokens_tensor = self.num_tokens_tensor.reshape(1)
        num_tokens_tensor = self.num_tokens_tensor
        max_num_tokens = self.max_num_tokens
        num_blocks = min(max_num_tokens, max_blocks)
        new_free_list_head = torch.empty(2, dtype=torch.int64, device=self.device)
        has_host = 1 if paged_stash_buffer.host_buffer is not None else 0
        host_dst = (paged_stash_buffer.host_buffer if paged_stash_buffer.host_buffer is not None
                    else paged_stash_buffer.cuda_buffer)
        paged_stash_copy_kernel[(num_blocks,)](
            self._tensor.view(paged_stash_buffer.cuda_buffer.dtype),
            paged_stash_buffer.cuda_buffer, host_dst, num_tokens_tensor,
            paged_stash_buffer.free_list_cuda, paged_stash_buffer.free_list_host,
            paged_stash_buffer.free_list_head, paged_stash_buffer.free_list_tail,
            paged_stash_buffer.free_list_capacity, self.page_record, paged_stash_buffer.overflow,
            paged_stash_buffer.host_spill, self.spilled_to_host, new_free_list_head,
            PAGE_SIZE=self.page_size, HIDDEN_SIZE=self.hidden_size,
            BLOCK_SIZE=GLOBAL_BLOCK_SIZE, HAS_HOST_BUFFER=has_host)
        paged_stash_buffer.free_list_head.copy_(new_free_list_head)
        self._original_tensor = self._tensor
        self._tensor = None

    def reload_from_stash(self, paged_stash_buffer, max_blocks=2048):
        assert self._tensor is not None, "reload_from_stash expects _tensor pre-allocated on main"
        assert tuple(self._tensor.shape) == tuple(self.original_shape), (
            f"_tensor shape {tuple(self._tensor.shape)} != "
            f"original_shape {tuple(self.original_shape)}")
        assert self._tensor.dtype == self.dtype and self._tensor.device.type == self.device.type
        num_blocks = min(self.max_num_tokens, max_blocks)
        new_free_list_tail = torch.empty(2, dtype=torch.int64, device=self.device)
        host_src = (paged_stash_buffer.host_buffer if paged_stash_buffer.host_buffer is not None
                    else paged_stash_buffer.cuda_buffer)
        paged_stash_pop_kernel[(num_blocks,)](
            paged_stash_buffer.cuda_buffer, host_src,
            self._tensor.view(paged_stash_buffer.cuda_buffer.dtype), self.num_tokens_tensor,
            self.page_record, self.spilled_to_host, paged_stash_buffer.overflow,
            paged_stash_buffer.free_list_cuda, paged_stash_buffer.free_list_host,
            paged_stash_buffer.free_list_tail, paged_stash_buffer.free_list_capacity,
            new_free_list_tail, PAGE_SIZE=self.page_size, HIDDEN_SIZE=self.hidden_size,
            BLOCK_SIZE=GLOBAL_BLOCK_SIZE)
        paged_stash_buffer.free_list_tail.copy_(new_free_list_tail)


class PagedStashManager:
    """Megatron's singleton manager (the parts the adapter reaches)."""

    STASH_MGR = None

    @classmethod
    def get_instance(cls):
        if cls.STASH_MGR is None:
            cls.STASH_MGR = PagedStashManager()
        return cls.STASH_MGR

    def __init__(self):
        self.enabled = False
        self._pack_stream = torch.cuda.Stream()
        self._unpack_stream = self._pack_stream
        self._pack_stream_status = 'idle'
        self._unpack_stream_status = 'idle'
        self.paged_tensors_to_stash = []
        self.paged_tensors_stash_in_progress = []
        self.paged_tensors_to_reload = {}
        self.iteration = 0
        self._current_layer_name = None
        self.vp_size = None
        self.current_vp_stage = None
        self.status = 'begin'
        self._pp_schedule = None
        self.current_layer = None
        self.current_microbatch = None
        self.current_schedule_index = None
        self.max_tokens_across_vp_stages = None
        self.temp_tokens_across_vp_stages = None
        self.max_avg_tokens_across_vp_stages = None
        self.temp_avg_tokens_across_vp_stages = None
        self.num_tokens_tensor = None
        self.max_num_tokens = None
        self.avg_num_tokens = None
        self.stash_buffers = None
        self.overflow = None
        self.host_spill = None
        self.device = None
        self.page_size = 64

    @property
    def pack_stream(self):
        return self._pack_stream

    @property
    def unpack_stream(self):
        return self._unpack_stream

    def set_current_layer_name(self, name):
        self._current_layer_name = name

    def get_schedule_layer(self, vp_stage, layer_no, microbatch_no):
        assert layer_no < 1000 and microbatch_no < 1000, "Schedule encoding overflow"
        return vp_stage * 1000000 + layer_no * 1000 + microbatch_no

    def add_paged_tensor_to_stash(self, paged_tensor):
        if self.status == 'captured':
            self.paged_tensors_to_stash.append(paged_tensor)

    def stash_paged_tensors(self, pp_schedule_layer):
        current_stream = torch.cuda.current_stream()
        self.pack_stream.wait_stream(current_stream)
        with torch.cuda.stream(self.pack_stream):
            if self.status == 'captured':
                self._pack_stream_status = 'stashing'
                if pp_schedule_layer not in self.paged_tensors_to_reload:
                    self.paged_tensors_to_reload[pp_schedule_layer] = []
                assert len(self.paged_tensors_to_reload[pp_schedule_layer]) == 0, (
                    f"paged_tensors_to_reload {pp_schedule_layer} is not empty "
                    f"{self.paged_tensors_to_reload[pp_schedule_layer]}")
                while len(self.paged_tensors_to_stash) > 0:
                    paged_tensor = self.paged_tensors_to_stash.pop(0)
                    stash_buffer = self.stash_buffers[paged_tensor.dtype][paged_tensor.hidden_size]
                    paged_tensor.offload_to_stash(stash_buffer)
                    self.paged_tensors_to_reload[pp_schedule_layer].append(paged_tensor)
                    self.paged_tensors_stash_in_progress.append(paged_tensor)
        assert len(self.paged_tensors_to_stash) == 0, (
            f"paged_tensors_to_stash is not empty {self.paged_tensors_to_stash}")

    def wait_for_stash_to_complete(self):
        current_stream = torch.cuda.current_stream()
        if self._pack_stream_status == 'stashing':
            current_stream.wait_stream(self.pack_stream)
            self._pack_stream_status = 'idle'
            while len(self.paged_tensors_stash_in_progress) > 0:
                paged_tensor = self.paged_tensors_stash_in_progress.pop(0)
                paged_tensor._original_tensor = None

    def allocate_stash_buffers(self, moe_paged_stash_buffer_size_factor_cuda=1.10,
                               moe_paged_stash_buffer_size_factor_cpu=0.0):
        self.stash_buffers = {}
        if self.overflow is None:
            self.overflow = torch.zeros(1, dtype=torch.int64, device=self.device)
        else:
            self.overflow.zero_()
        if self.host_spill is None:
            self.host_spill = torch.zeros(1, dtype=torch.int64, device=self.device)
        else:
            self.host_spill.zero_()
        cuda_factor = moe_paged_stash_buffer_size_factor_cuda
        cpu_factor = moe_paged_stash_buffer_size_factor_cpu
        if cuda_factor >= 0:
            max_tokens_dict = self.max_avg_tokens_across_vp_stages
            cuda_scale = cuda_factor
        else:
            max_tokens_dict = self.max_tokens_across_vp_stages
            cuda_scale = -cuda_factor
        if not max_tokens_dict:
            max_tokens_dict = self.max_tokens_across_vp_stages
        if cpu_factor > 0:
            host_tokens_dict = (
                self.max_avg_tokens_across_vp_stages or self.max_tokens_across_vp_stages)
            cpu_scale = cpu_factor
        elif cpu_factor < 0:
            host_tokens_dict = self.max_tokens_across_vp_stages
            cpu_scale = -cpu_factor
        else:
            host_tokens_dict = None
            cpu_scale = 0.0
        if max_tokens_dict is None:
            return
        for dtype, hidden_size in max_tokens_dict:
            if dtype not in self.stash_buffers:
                self.stash_buffers[dtype] = {}
            assert hidden_size not in self.stash_buffers[dtype]
            num_tokens = int(max_tokens_dict[dtype, hidden_size] * cuda_scale)
            num_tokens_host = (
                int(host_tokens_dict[dtype, hidden_size] * cpu_scale)
                if host_tokens_dict is not None and (dtype, hidden_size) in host_tokens_dict
                else 0)
            self.stash_buffers[dtype][hidden_size] = PagedStashBuffer(
                num_tokens, hidden_size, self.page_size, self.device, self.overflow,
                self.host_spill, dtype, num_tokens_host=num_tokens_host)

    def release_stash_buffers(self):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.stash_buffers = None

    def update_model_chunk(self, vp_stage_index):
        if self.current_layer is None:
            self.current_layer = [1 for _ in range(self.vp_size)]
            self.current_microbatch = [0 for _ in range(self.vp_size)]
        self.current_layer[vp_stage_index] = 1
        self.current_microbatch[vp_stage_index] += 1

    def on_save_for_backward(self, tensor) -> Any:
        if (self.max_num_tokens is None or tensor.dim() == 0
                or not hasattr(tensor, 'grouped_tensor_scale_inv')):
            return tensor
        original_shape = tensor.shape
        columnwise_scale_inv = tensor.grouped_tensor_scale_inv
        tensor = tensor.flatten()
        hidden_size = tensor.numel() // (
            self.max_num_tokens if not columnwise_scale_inv
            else self.max_num_tokens // SCALE_INV_BLOCK_SIZE)
        if self.max_tokens_across_vp_stages is None:
            self.max_tokens_across_vp_stages = {}
            self.temp_tokens_across_vp_stages = {}
            self.max_avg_tokens_across_vp_stages = {}
            self.temp_avg_tokens_across_vp_stages = {}
        assert self.status != 'capture', "the stand-in has no capture iteration"
        tensor.grouped_tensor_scale_inv = columnwise_scale_inv
        paged_tensor = PagedTensor(
            tensor, num_tokens_tensor=self.num_tokens_tensor, avg_num_tokens=None,
            vp_stage=self.current_vp_stage, original_shape=original_shape,
            schedule_layer_no=(
                self._pp_schedule[self.current_schedule_index]
                if self._pp_schedule is not None
                and self.current_schedule_index < len(self._pp_schedule) else None),
            is_columnwise_scale_inv=columnwise_scale_inv, max_num_tokens=self.max_num_tokens,
            hidden_size=hidden_size, page_size=self.page_size)
        if self.status == 'captured':
            self.add_paged_tensor_to_stash(paged_tensor)
        return paged_tensor


def get_paged_stash_context(name=None, max_num_tokens=None, num_tokens_tensor=None,
                            avg_num_tokens=None):
    stash_manager = PagedStashManager.get_instance()
    if not stash_manager.enabled:
        return nullcontext()
    stash_manager.max_num_tokens = max_num_tokens
    stash_manager.avg_num_tokens = avg_num_tokens
    assert num_tokens_tensor is not None and isinstance(num_tokens_tensor, torch.Tensor)
    stash_manager.num_tokens_tensor = num_tokens_tensor.clone()
    stash_manager.set_current_layer_name(name) if name is not None else None
    return nullcontext()  # Megatron's PagedStashContext (saved-tensor hooks)


def paged_stash_init_chunk_handler(vp_size, vp_stage):
    stash_manager = PagedStashManager.get_instance()
    stash_manager.vp_size = vp_size if vp_size is not None else 1
    stash_manager.current_vp_stage = vp_stage if vp_stage is not None else 0
    stash_manager.update_model_chunk(stash_manager.current_vp_stage)


def paged_stash_reset(enabled=True, config=None):
    stash_manager = PagedStashManager.get_instance()
    stash_manager.enabled = enabled
    stash_manager.iteration += 1
    if config is not None:
        stash_manager.page_size = config.moe_paged_stash_page_size
    stash_manager.current_schedule_index = 0
    if not enabled:
        return
    if stash_manager.status == 'begin':
        stash_manager.status = 'capture'
    elif stash_manager.status == 'capture':
        stash_manager.status = 'captured'
        cuda_factor = config.moe_paged_stash_buffer_size_factor_cuda if config is not None else 1.10
        cpu_factor = config.moe_paged_stash_buffer_size_factor_cpu if config is not None else 0.0
        stash_manager.allocate_stash_buffers(
            moe_paged_stash_buffer_size_factor_cuda=cuda_factor,
            moe_paged_stash_buffer_size_factor_cpu=cpu_factor)
    elif stash_manager.status == 'captured':
        if stash_manager.stash_buffers is None:
            cuda_factor = (
                config.moe_paged_stash_buffer_size_factor_cuda if config is not None else 1.10)
            cpu_factor = (
                config.moe_paged_stash_buffer_size_factor_cpu if config is not None else 0.0)
            stash_manager.allocate_stash_buffers(
                moe_paged_stash_buffer_size_factor_cuda=cuda_factor,
                moe_paged_stash_buffer_size_factor_cpu=cpu_factor)
    if stash_manager.status == 'captured':
        assert stash_manager.stash_buffers is not None, (
            "Paged stash: captured state but stash_buffers is None after reset/allocation.")
        for dtype in stash_manager.stash_buffers.keys():
            for hidden_size in stash_manager.stash_buffers[dtype].keys():
                stash_manager.stash_buffers[dtype][hidden_size].reset()
        stash_manager.overflow.zero_()
        stash_manager.host_spill.zero_()
        stash_manager.current_layer = [1 for _ in range(stash_manager.vp_size)]
        stash_manager.current_microbatch = [0 for _ in range(stash_manager.vp_size)]
        assert len(stash_manager.paged_tensors_to_stash) == 0, (
            f"paged_tensors_to_stash is not empty {stash_manager.paged_tensors_to_stash}")
        assert len(stash_manager.paged_tensors_stash_in_progress) == 0, (
            f"paged_tensors_stash_in_progress is not empty "
            f"{stash_manager.paged_tensors_stash_in_progress}")


def check_paged_stash_overflow():
    stash_manager = PagedStashManager.get_instance()
    if not stash_manager.enabled or stash_manager.overflow is None:
        return torch.zeros(1, dtype=torch.int64, device='cuda')
    return stash_manager.overflow.ne(0)
