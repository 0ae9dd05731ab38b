"""Framework-neutral helpers: recognise arrays, find their device, allocate outputs beside them.

Inputs go to the extension as they are (DLPack or the buffer protocol, no copies). Outputs are
allocated here, in the framework and on the device of the logits: numpy for numpy (and for any other
host array), torch for torch, cupy for cupy. Host-side lists (prompts, token lists) become
``array.array`` objects, so that the package needs no numpy at run time.
"""

from __future__ import annotations

import array as _pyarray
import contextlib
import math
import numbers
import struct
from collections.abc import Mapping
from typing import Any, Optional, Sequence

# DLPack device types.
DL_CPU = 1
DL_CUDA = 2
DL_CUDA_HOST = 3
DL_CUDA_MANAGED = 13


def framework(x: Any) -> str:
    """'numpy', 'torch', 'cupy', 'jax' or 'other', from the type's module."""
    mod = type(x).__module__.split(".", 1)[0]
    if mod in ("numpy", "torch", "cupy"):
        return mod
    if mod in ("jax", "jaxlib"):
        return "jax"
    return "other"


def is_array(x: Any) -> bool:
    if x is None or isinstance(x, (str, bytes, numbers.Number, list, tuple, dict)):
        return False
    if hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__"):
        return True
    try:
        memoryview(x)
        return True
    except TypeError:
        return False


def device(x: Any) -> tuple:
    """(DLPack device type, device id) of an array; host memory for buffer-protocol objects."""
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        try:
            t, i = dev()
            return int(t), int(i)
        except Exception:  # noqa: BLE001 - a producer without a usable answer is host memory
            pass
    return DL_CPU, 0


def on_cuda(x: Any) -> bool:
    return device(x)[0] in (DL_CUDA, DL_CUDA_MANAGED)


def shape(x: Any) -> tuple:
    s = getattr(x, "shape", None)
    if s is None:
        s = memoryview(x).shape
    return tuple(int(d) for d in s)


def require_array(x: Any, name: str) -> Any:
    if not is_array(x):
        raise TypeError(
            f"sonic: argument '{name}' must be an array (numpy, torch, cupy, jax or any DLPack "
            f"producer), got {type(x).__name__}"
        )
    return x


def _int(name: str, v: Any, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        # numpy / torch scalars
        if hasattr(v, "item") and not isinstance(v, bool):
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"sonic: argument '{name}' must be an integer, got {v!r}")
    v = int(v)
    if lo is not None and v < lo or hi is not None and v > hi:
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise ValueError(f"sonic: argument '{name}' = {v} is out of range {rng}")
    return v


def _float(name: str, v: Any) -> float:
    if isinstance(v, bool):
        raise TypeError(f"sonic: argument '{name}' must be a number, got {v!r}")
    if hasattr(v, "item") and not isinstance(v, numbers.Number):
        v = v.item()
    if not isinstance(v, numbers.Real):
        raise TypeError(f"sonic: argument '{name}' must be a number, got {v!r}")
    x = float(v)
    # The library reads float32: a finite value that float32 cannot hold is an error here, where it
    # would otherwise become inf or 0 (a temperature of 1e-300 would silently mean greedy).
    if math.isfinite(x):
        try:  # (some Python versions raise where others round to inf)
            f = struct.unpack("f", struct.pack("f", x))[0]
        except OverflowError:
            f = math.inf
        if math.isinf(f):
            raise ValueError(f"sonic: argument '{name}' = {x!r} does not fit a float32")
        if f == 0.0 and x != 0.0:
            raise ValueError(f"sonic: argument '{name}' = {x!r} underflows a float32 to 0")
    return x


def to_list(x: Any, name: str) -> list:
    """A host Python list from a sequence or an array of any framework (arrays are copied)."""
    if x is None:
        return []
    if isinstance(x, (list, tuple, range)):
        return list(x)
    if isinstance(x, Mapping):  # list() would keep its keys: a {row: value} map read as the rows
        raise TypeError(
            f"sonic: argument '{name}' must be a sequence or an array (one value a row), not a "
            f"{type(x).__name__}"
        )
    if hasattr(x, "tolist"):
        if hasattr(x, "detach"):  # torch
            x = x.detach().cpu()
        out = x.tolist()
        if not isinstance(out, list):
            raise ValueError(f"sonic: argument '{name}' must be 1-D, got a scalar")
        return out
    try:
        return list(x)
    except TypeError:
        raise TypeError(
            f"sonic: argument '{name}' must be a sequence or an array of token ids, "
            f"got {type(x).__name__}"
        ) from None


def host_i32(x: Any, name: str) -> Optional[Any]:
    """A 1-D int32 host array for the extension: passed as is when it already is one (numpy
    int32, contiguous), else converted from a list or any array into array.array('i')."""
    if x is None:
        return None
    if framework(x) == "numpy" and str(x.dtype) == "int32" and x.ndim == 1 and x.flags.c_contiguous:
        return x
    values = to_list(x, name)
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"sonic: argument '{name}[{i}]' must be an integer token id, got {v!r}")
        if not -(2**31) <= v < 2**31:
            raise ValueError(f"sonic: argument '{name}[{i}]' = {v} does not fit in int32")
    return _pyarray.array("i", values)


def host_f32(values: Sequence[float], name: str) -> Any:
    out = []
    for i, v in enumerate(values):
        out.append(_float(f"{name}[{i}]", v))
    return _pyarray.array("f", out)


class Allocator:
    """Allocates outputs in the framework and on the device of a reference array."""

    def __init__(self, like: Any):
        self.kind = framework(like)
        self.dev = device(like)
        self.like = like
        if self.kind == "torch":
            import torch

            self._torch = torch
            self._tdev = like.device
        elif self.kind == "cupy":
            import cupy

            self._cupy = cupy
        elif self.dev[0] in (DL_CUDA, DL_CUDA_MANAGED):
            # jax and other device arrays: torch or cupy would be needed to allocate outputs.
            try:
                import cupy

                self.kind = "cupy"
                self._cupy = cupy
            except ImportError:
                raise TypeError(
                    "sonic: device arrays of this framework need cupy installed to allocate "
                    "outputs; pass torch or cupy arrays"
                ) from None
        else:
            self.kind = "numpy"
            import numpy

            self._np = numpy

    def empty(self, shape: tuple, dtype: str):
        if self.kind == "torch":
            t = {"int32": self._torch.int32, "float32": self._torch.float32}[dtype]
            return self._torch.empty(shape, dtype=t, device=self._tdev)
        if self.kind == "cupy":
            with self._cupy.cuda.Device(self.dev[1]):
                return self._cupy.empty(shape, dtype=dtype)
        return self._np.empty(shape, dtype=dtype)

    def full(self, shape: tuple, value, dtype: str):
        a = self.empty(shape, dtype)
        a[...] = value
        return a

    def from_list(self, values: list, dtype: str):
        if self.kind == "torch":
            t = {"int32": self._torch.int32, "float32": self._torch.float32}[dtype]
            return self._torch.tensor(values, dtype=t, device=self._tdev)
        if self.kind == "cupy":
            with self._cupy.cuda.Device(self.dev[1]):
                return self._cupy.asarray(values, dtype=dtype)
        return self._np.asarray(values, dtype=dtype)

    def as_input(self, x: Any, name: str, dtype: str = "int32"):
        """An input array: arrays pass through untouched (checked by the extension); Python
        sequences are converted into this framework's arrays."""
        if x is None:
            return None
        if isinstance(x, (list, tuple, range)):
            values = list(x)
            for i, v in enumerate(values):
                if dtype == "int32" and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
                    raise TypeError(f"sonic: argument '{name}[{i}]' must be an integer, got {v!r}")
            return self.from_list(values, dtype)
        return require_array(x, name)


def on_stream(stream: Any, like: Any):
    """A context in which the logits' framework allocates and fills on an explicit ``stream``: the
    temporaries and outputs a call makes (lists turned into arrays, default rules, the results) are
    then ordered with the kernels that read and write them, where on the framework's current stream
    an explicit stream would not wait for their fills, and the allocator could hand their memory
    out again while the kernels still use it. A no-op without an explicit stream or for host
    arrays."""
    if stream is None or not on_cuda(like):
        return contextlib.nullcontext()
    kind = framework(like)
    if kind == "torch":
        import torch

        if not isinstance(stream, torch.cuda.Stream):
            handle = stream_handle(stream, like)
            stream = (torch.cuda.ExternalStream(handle, device=like.device) if handle
                      else torch.cuda.default_stream(like.device))
        return torch.cuda.stream(stream)
    if kind == "cupy":
        import cupy

        if not isinstance(stream, cupy.cuda.Stream):
            stream = cupy.cuda.ExternalStream(stream_handle(stream, like))
        return stream  # a cupy stream is the context that makes it current
    return contextlib.nullcontext()


def stream_handle(stream: Any, like: Any) -> int:
    """The cudaStream_t (as an integer) for a call: the explicit stream, else the caller's current
    stream in the logits' framework (torch, cupy), else 0 (the legacy default stream)."""
    if stream is not None:
        if isinstance(stream, bool):
            raise TypeError("sonic: argument 'stream' must be an int or a stream object")
        if isinstance(stream, numbers.Integral):
            return int(stream)
        for attr in ("cuda_stream", "ptr", "handle"):
            v = getattr(stream, attr, None)
            if isinstance(v, numbers.Integral):
                return int(v)
        raise TypeError(
            f"sonic: argument 'stream' must be an int (a cudaStream_t) or a torch/cupy stream, "
            f"got {type(stream).__name__}"
        )
    if not on_cuda(like):
        return 0
    kind = framework(like)
    if kind == "torch":
        import torch

        return int(torch.cuda.current_stream(like.device).cuda_stream)
    if kind == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0
