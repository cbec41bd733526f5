"""Fake ``torch.cuda``: answers from the simulated node (see torch._fake)."""

import warnings

from torch import _fake, version

_initialized = False


def is_available():
    """True when the simulated node has a usable GPU and driver."""
    current = _fake.mode()
    if current == "driver_too_old":
        warnings.warn(
            "CUDA initialization: " + _fake.DRIVER_TOO_OLD
            + " (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:109.)",
            UserWarning,
            stacklevel=2,
        )
        return False
    return bool(_fake.gpus())


def device_count():
    """How many GPUs the simulated node has."""
    return len(_fake.gpus())


def init():
    """Initialise CUDA, raising like real torch when it cannot."""
    global _initialized  # pylint: disable=global-statement
    _fake.check_cuda_context(0)
    _initialized = True


def is_initialized():
    """Whether init() succeeded."""
    return _initialized


def _gpu(index):
    if hasattr(index, "index"):
        index = index.index or 0
    index = 0 if index is None else int(index)
    _fake.check_cuda_context(0)
    found = _fake.gpus()
    if not 0 <= index < len(found):
        raise AssertionError("Invalid device id")
    return found[index]


def get_device_name(device=None):
    """The GPU's name, as nvidia-smi prints it."""
    return _gpu(device)[0]


def get_device_capability(device=None):
    """(major, minor) compute capability."""
    return _gpu(device)[1]


def get_arch_list():
    """The architectures this build has kernels for ([] without a usable GPU, like real torch)."""
    if not is_available():
        return []
    return list(version._arch_list)  # pylint: disable=protected-access


def synchronize(device=None):
    """Wait for the device (nothing to wait for here)."""
    _gpu(device)


def current_device():
    """The current device index."""
    _gpu(0)
    return 0
