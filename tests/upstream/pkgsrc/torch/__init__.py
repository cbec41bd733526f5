"""Fake torch for the llmfleet.engines tests (not PyTorch).

It offers the small API subset the GPU compute check uses (see docs/dev/CONTRACTS.md) and
simulates a GPU node chosen by environment variables read at call time:

- ``FAKE_TORCH_CUDA``: ``none`` (default), ``ok``, ``no_kernel_image``, ``unsupported_ptx``,
  ``driver_too_old``, ``missing_libcudart``, ``glibc``;
- ``FAKE_TORCH_GPUS``: ``name=major.minor`` entries separated by ``;``;
- ``FAKE_TORCH_CPU``: ``ok`` (default), ``wrong``, ``illegal_instruction`` (matrix products on the CPU).
"""

from torch import cuda, version
from torch._fake import device, dtype, float16, float32
from torch._tensor import Size, Tensor, empty_like, ones, tensor, zeros
from torch.version import __version__

__all__ = [
    "Size",
    "Tensor",
    "__version__",
    "cuda",
    "device",
    "dtype",
    "empty_like",
    "float16",
    "float32",
    "ones",
    "tensor",
    "version",
    "zeros",
]
