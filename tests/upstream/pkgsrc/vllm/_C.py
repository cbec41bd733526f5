"""Stands in for vLLM's compiled extension ``_C.abi3.so``."""

import math
import os

from torch import _fake

_SO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_C.abi3.so")

if _fake.mode() == "missing_libcudart":
    raise ImportError("libcudart.so.13: cannot open shared object file: No such file or directory")
if _fake.mode() == "glibc":
    raise ImportError(
        "/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by %s)" % _SO
    )


def _launch():
    if os.environ.get("FAKE_VLLM_KERNEL", "ok") == "no_kernel_image":
        raise RuntimeError(_fake.NO_KERNEL_IMAGE)
    _fake.check_kernel_launch()


def rms_norm(out, input, weight, epsilon):  # pylint: disable=redefined-builtin
    """out = input / sqrt(mean(input**2, last dim) + epsilon) * weight."""
    if input.is_cuda:
        _launch()
    hidden = input.shape[-1] if input.shape else 1
    values = input._data  # pylint: disable=protected-access
    gains = weight._data  # pylint: disable=protected-access
    if len(gains) != hidden or out.shape != input.shape:
        raise RuntimeError("rms_norm: shapes do not match")
    result = []
    for start in range(0, len(values), hidden):
        row = values[start:start + hidden]
        scale = 1.0 / math.sqrt(math.fsum(x * x for x in row) / hidden + float(epsilon))
        result.extend(x * scale * g for x, g in zip(row, gains))
    out._data[:] = result  # pylint: disable=protected-access
