"""Fake vLLM for the llmfleet.engines tests (not vLLM).

Like the real package, importing it imports torch; its compiled extension (``vllm._C``) is only
loaded by the ops in ``vllm._custom_ops``. ``FAKE_VLLM_KERNEL=no_kernel_image`` makes vLLM's own
kernels fail while torch's pass.
"""

import torch  # noqa: F401  pylint: disable=unused-import

from vllm.version import __version__

__all__ = ["__version__"]
