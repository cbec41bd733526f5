"""The simulated node behind the fake torch: modes, GPUs and the messages real CUDA prints."""

import os

MODES = ("none", "ok", "no_kernel_image", "unsupported_ptx", "driver_too_old", "missing_libcudart", "glibc")
DEFAULT_GPUS = "NVIDIA H100 80GB HBM3=9.0"

_ASYNC_NOTE = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
    "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
NO_KERNEL_IMAGE = "CUDA error: no kernel image is available for execution on the device" + _ASYNC_NOTE
UNSUPPORTED_PTX = "CUDA error: the provided PTX was compiled with an unsupported toolchain." + _ASYNC_NOTE
DRIVER_TOO_OLD = (
    "The NVIDIA driver on your system is too old (found version 12020). Please update your GPU driver "
    "by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx "
    "Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with "
    "your version of the CUDA driver."
)
NO_DRIVER = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
    "driver from http://www.nvidia.com/Download/index.aspx"
)
INVALID_ORDINAL = "CUDA error: invalid device ordinal" + _ASYNC_NOTE


CPU_MODES = ("ok", "wrong", "illegal_instruction")


def cpu_mode():
    """The simulated CPU (FAKE_TORCH_CPU): ``ok``; ``wrong``: a matrix product computes one element
    wrong; ``illegal_instruction``: the process dies of SIGILL at a matrix product, as a torch built
    for instructions this CPU lacks does."""
    value = os.environ.get("FAKE_TORCH_CPU", "ok").strip() or "ok"
    if value not in CPU_MODES:
        raise RuntimeError("fake torch: FAKE_TORCH_CPU=%r is not one of %s" % (value, ", ".join(CPU_MODES)))
    return value


def mode():
    """The simulated CUDA state (FAKE_TORCH_CUDA)."""
    value = os.environ.get("FAKE_TORCH_CUDA", "none").strip() or "none"
    if value not in MODES:
        raise RuntimeError("fake torch: FAKE_TORCH_CUDA=%r is not one of %s" % (value, ", ".join(MODES)))
    return value


def gpus():
    """[(name, (major, minor)), ...] from FAKE_TORCH_GPUS; empty when there is no usable GPU."""
    if mode() in ("none", "driver_too_old"):
        return []
    result = []
    for item in os.environ.get("FAKE_TORCH_GPUS", DEFAULT_GPUS).split(";"):
        item = item.strip()
        if not item:
            continue
        name, _sep, cap = item.rpartition("=")
        major, _sep, minor = cap.strip().partition(".")
        result.append((name.strip(), (int(major), int(minor or 0))))
    return result


def check_cuda_context(index=0):
    """Raise what real torch raises when a CUDA context cannot be made for device `index`."""
    current = mode()
    if current == "none":
        raise RuntimeError(NO_DRIVER)
    if current == "driver_too_old":
        raise RuntimeError(DRIVER_TOO_OLD)
    if not 0 <= index < len(gpus()):
        raise RuntimeError(INVALID_ORDINAL)


def check_kernel_launch():
    """Raise what a CUDA kernel launch raises on this simulated node."""
    current = mode()
    if current == "no_kernel_image":
        raise RuntimeError(NO_KERNEL_IMAGE)
    if current == "unsupported_ptx":
        raise RuntimeError(UNSUPPORTED_PTX)


class dtype:  # noqa: N801 - named like torch's
    """A tensor element type."""

    def __init__(self, name, is_floating_point=True):
        self.name = name
        self.is_floating_point = is_floating_point

    def __repr__(self):
        return "torch." + self.name


float16 = dtype("float16")
float32 = dtype("float32")


class device:  # noqa: N801 - named like torch's
    """A device: ``cpu``, ``cuda`` or ``cuda:N``."""

    def __init__(self, spec="cpu", index=None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        spec = str(spec)
        kind, _sep, number = spec.partition(":")
        if kind not in ("cpu", "cuda"):
            raise RuntimeError("Expected one of cpu, cuda device type at start of device string: " + spec)
        self.type = kind
        if number:
            index = int(number)
        if kind == "cuda" and index is None:
            index = 0
        self.index = index

    def __eq__(self, other):
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)

    def __repr__(self):
        return "device(type=%r%s)" % (self.type, "" if self.index is None else ", index=%d" % self.index)
