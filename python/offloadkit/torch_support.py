"""PyTorch helpers. torch is imported on first use only, so that the package (and NumPy
implementations) work where PyTorch is not installed."""

import sys

from .errors import LogicError, StateError
from .types import DTYPE_SIZES, LEGACY_DEFAULT_STREAM, Tensor, dtype_name

_TORCH_DTYPES = {"u8": "uint8", "i8": "int8", "f16": "float16", "bf16": "bfloat16",
                 "f32": "float32", "i32": "int32", "f64": "float64", "i64": "int64"}


def _torch():
    try:
        import torch
    except ImportError as e:
        raise LogicError(f"PyTorch is not importable in this interpreter ({sys.executable}: "
                         f"{e}); run the check in the interpreter that has torch (its python -m "
                         "offloadkit check, or OFFLOADKIT_PYTHON=that interpreter for "
                         "offloadkit check --python), with offloadkit installed there") from e
    return torch


def torch_stream(stream):
    """``torch.cuda.ExternalStream`` over an offloadkit ``Stream`` (or a raw cudaStream_t int), on
    the stream's device; the device's default stream for 0 or ``LEGACY_DEFAULT_STREAM``. Only
    meaningful on the cuda executor."""
    torch = _torch()
    device = getattr(stream, "device", None)
    if int(stream) in (0, LEGACY_DEFAULT_STREAM):
        return torch.cuda.default_stream(None if device is None else int(device))
    if device is None:
        return torch.cuda.ExternalStream(int(stream))
    return torch.cuda.ExternalStream(int(stream), device=torch.device("cuda", int(device)))


def torch_dtype(dtype):
    """The torch dtype of a protocol dtype name ("f32", "bf16", ...)."""
    return getattr(_torch(), _TORCH_DTYPES[dtype_name(dtype)])


def as_torch(tensor: Tensor):
    """A ``torch.Tensor`` of ``tensor``'s dtype and shape over its memory, without a copy. The
    torch tensor keeps ``tensor.data`` alive as long as its storage lives."""
    torch = _torch()
    data = tensor.data
    if tensor.nbytes == 0:
        device = (torch.device("cuda", tensor.device) if hasattr(data, "__cuda_array_interface__")
                  else torch.device("cpu"))
        return torch.empty(tensor.shape, dtype=torch_dtype(tensor.dtype), device=device)
    if hasattr(data, "__cuda_array_interface__"):
        flat = torch.as_tensor(data, device=torch.device("cuda", tensor.device))
    elif hasattr(data, "__array_interface__"):
        import numpy

        flat = torch.from_numpy(numpy.asarray(data))
    else:
        raise StateError(f"{tensor!r}: its data {data!r} exposes no array interface")
    return flat.view(torch_dtype(tensor.dtype)).reshape(tensor.shape)


def from_torch(t, release=None, device=None, before=None) -> Tensor:
    """A protocol ``Tensor`` describing the torch tensor ``t`` (contiguous). Its ``release`` drops
    the reference to ``t`` (so the memory stays valid until the caller releases it, and the
    caching allocator orders its reuse on the stream it was allocated on), then calls ``release``
    where given; ``before`` runs first (a wait the memory's reuse needs). ``device``: the device to
    report (default: the tensor's CUDA device, 0 for a CPU tensor)."""
    if not t.is_contiguous():
        raise LogicError(f"from_torch: a tensor of strides {tuple(t.stride())} is not "
                         "contiguous; call .contiguous() first")
    name = dtype_name(t.dtype)
    nbytes = t.numel() * DTYPE_SIZES[name]
    if device is None:
        device = t.device.index if t.is_cuda else 0
    held = [t]

    def give_back():
        if before is not None:
            before()
        held.clear()
        if release is not None:
            release()

    return Tensor(t, nbytes, device, name, tuple(t.shape), give_back)
