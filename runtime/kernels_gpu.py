"""The runtime's ``--fallback gpu`` path: the kernels of `runtime.kernels` on the cupy namespace.

Every operator here is its namesake in `runtime.kernels` called with ``xp = cupy``: the same
code, the same checks and messages, and identical results (dtype, shape and values, bit for bit;
the module docstring of `runtime.kernels` says why the GEMMs are exact on the GPU). numpy
operands are copied to the GPU and the result back to the host; if any array operand is a CuPy
array, the result stays on the device as a CuPy array. CuPy is imported lazily: `available`
says whether it and a CUDA GPU are usable, and never raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from runtime import kernels

__all__ = [
    "add",
    "available",
    "avg_pool2d",
    "batch_matmul",
    "clip",
    "concat",
    "conv2d",
    "conv2d_acc",
    "dense",
    "elementwise",
    "embedding",
    "fold_window",
    "gelu",
    "global_avg_pool",
    "layer_norm",
    "matmul",
    "matmul_acc",
    "max_pool2d",
    "namespace",
    "reduce",
    "relu",
    "requantize",
    "reshape",
    "rms_norm",
    "rotary",
    "slice_axis",
    "softmax",
    "take",
    "transpose",
    "unavailable_reason",
    "where",
]


# --------------------------------------------------------------------------- cupy, lazily


@functools.cache
def _probe() -> tuple[ModuleType | None, str | None]:
    """Import CuPy and run one tiny kernel; return (cupy or None, reason it is unusable)."""
    try:
        import cupy as cp
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, f"CuPy cannot be imported: {type(exc).__name__}: {exc}"
    try:
        count = cp.cuda.runtime.getDeviceCount()
        if count < 1:
            return None, "no CUDA GPU is visible"
        # Compile and run one elementwise kernel and one DGEMM, so that NVRTC and cuBLAS work.
        probe = cp.arange(4, dtype=cp.float64).reshape(2, 2)
        if int((probe @ probe).sum() + (probe > 1).sum()) != 24:
            return None, "a CuPy smoke test on the GPU returned a wrong result"
    except Exception as exc:  # no driver, no device, NVRTC or cuBLAS missing
        return None, f"CuPy cannot use a CUDA GPU: {type(exc).__name__}: {exc}"
    return cp, None


def available() -> bool:
    """True if CuPy imports and can run kernels on a CUDA GPU; never raises."""
    try:
        return _probe()[0] is not None
    except Exception:
        return False


def unavailable_reason() -> str | None:
    """Why `available` is False (None when it is True); never raises."""
    try:
        return _probe()[1]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def namespace() -> ModuleType:
    """The cupy module, the ``xp`` of these kernels; RuntimeError if it or a GPU is unusable."""
    cp, reason = _probe()
    if cp is None:
        raise RuntimeError(f"runtime.kernels_gpu: no usable CUDA GPU: {reason}")
    return cp


# --------------------------------------------------------------------------- operands


def _to_device(value: Any, cp: ModuleType) -> Any:
    """A numpy array (or a list or tuple holding some) copied to the GPU; else unchanged."""
    if isinstance(value, np.ndarray):
        return cp.asarray(value)
    if isinstance(value, list | tuple) and any(isinstance(v, np.ndarray) for v in value):
        return type(value)(_to_device(v, cp) for v in value)
    return value


def _on_device(value: Any, cp: ModuleType) -> bool:
    """True for a CuPy array, or a list or tuple holding one."""
    if isinstance(value, list | tuple):
        return any(_on_device(v, cp) for v in value)
    return isinstance(value, cp.ndarray)


def _on_gpu(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``kernel`` of `runtime.kernels` with ``xp = cupy``, on device copies of its numpy
    operands; the result comes back to the host unless an operand was on the device."""

    @functools.wraps(kernel)
    def call(*args: Any, **kwargs: Any) -> Any:
        cp = namespace()
        stay = any(_on_device(v, cp) for v in (*args, *kwargs.values()))
        out = kernel(*(_to_device(v, cp) for v in args),
                     **{k: _to_device(v, cp) for k, v in kwargs.items()}, xp=cp)
        return out if stay else cp.asnumpy(out)

    return call


# --------------------------------------------------------------------------- the operators

conv2d = _on_gpu(kernels.conv2d)
conv2d_acc = _on_gpu(kernels.conv2d_acc)
dense = _on_gpu(kernels.dense)
matmul = _on_gpu(kernels.matmul)
matmul_acc = _on_gpu(kernels.matmul_acc)
batch_matmul = _on_gpu(kernels.batch_matmul)
requantize = _on_gpu(kernels.requantize)
relu = _on_gpu(kernels.relu)
add = _on_gpu(kernels.add)
max_pool2d = _on_gpu(kernels.max_pool2d)
avg_pool2d = _on_gpu(kernels.avg_pool2d)
global_avg_pool = _on_gpu(kernels.global_avg_pool)
softmax = _on_gpu(kernels.softmax)
layer_norm = _on_gpu(kernels.layer_norm)
rms_norm = _on_gpu(kernels.rms_norm)
clip = _on_gpu(kernels.clip)
rotary = _on_gpu(kernels.rotary)
gelu = _on_gpu(kernels.gelu)
elementwise = _on_gpu(kernels.elementwise)
where = _on_gpu(kernels.where)
reduce = _on_gpu(kernels.reduce)
transpose = _on_gpu(kernels.transpose)
reshape = _on_gpu(kernels.reshape)
take = _on_gpu(kernels.take)
slice_axis = _on_gpu(kernels.slice_axis)
concat = _on_gpu(kernels.concat)
embedding = _on_gpu(kernels.embedding)
fold_window = _on_gpu(kernels.fold_window)
