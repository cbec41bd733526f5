"""A tiny dense tensor (a flat list of floats) with CUDA failure simulation."""

import math

from torch import _fake
from torch._fake import device as _device
from torch._fake import float32


class Size(tuple):
    """A tensor shape."""

    def numel(self):
        """Number of elements."""
        return math.prod(self) if self else 1


def _shape(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return Size(int(n) for n in args)


class Tensor:
    """A tensor; arithmetic on a CUDA device launches a (simulated) kernel."""

    def __init__(self, data, shape, device="cpu", dtype=float32):
        self._data = [float(x) for x in data]
        self.shape = Size(shape)
        self.device = _device(device)
        self.dtype = dtype
        if len(self._data) != self.shape.numel():
            raise RuntimeError("shape %s does not match %d values" % (list(self.shape), len(self._data)))

    @property
    def is_cuda(self):
        """Whether the tensor lives on a GPU."""
        return self.device.type == "cuda"

    def size(self):
        """The shape."""
        return self.shape

    def numel(self):
        """Number of elements."""
        return self.shape.numel()

    def _launch(self):
        if self.is_cuda:
            _fake.check_kernel_launch()

    def _binary(self, other, op):
        self._launch()
        if isinstance(other, Tensor):
            if other.device != self.device:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two devices, %s and %s!"
                    % (self.device, other.device)
                )
            if other.numel() == 1:
                values = [op(a, other._data[0]) for a in self._data]
            elif other.shape == self.shape:
                values = [op(a, b) for a, b in zip(self._data, other._data)]
            else:
                raise RuntimeError(
                    "The size of tensor a (%s) must match the size of tensor b (%s)" % (list(self.shape), list(other.shape))
                )
        else:
            values = [op(a, float(other)) for a in self._data]
        return Tensor(values, self.shape, self.device, self.dtype)

    def __mul__(self, other):
        return self._binary(other, lambda a, b: a * b)

    __rmul__ = __mul__

    def __add__(self, other):
        return self._binary(other, lambda a, b: a + b)

    __radd__ = __add__

    def __sub__(self, other):
        return self._binary(other, lambda a, b: a - b)

    def __truediv__(self, other):
        return self._binary(other, lambda a, b: a / b)

    def __matmul__(self, other):
        self._launch()
        if len(self.shape) != 2 or len(other.shape) != 2 or self.shape[1] != other.shape[0]:
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (%s and %s)"
                               % (list(self.shape), list(other.shape)))
        if other.device != self.device:
            raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, %s and %s!"
                               % (self.device, other.device))
        rows, inner, cols = self.shape[0], self.shape[1], other.shape[1]
        cpu = _fake.cpu_mode() if not self.is_cuda else "ok"
        if cpu == "illegal_instruction":
            import os  # pylint: disable=import-outside-toplevel
            import signal  # pylint: disable=import-outside-toplevel

            os.kill(os.getpid(), signal.SIGILL)
        values = [math.fsum(self._data[i * inner + k] * other._data[k * cols + j] for k in range(inner))
                  for i in range(rows) for j in range(cols)]
        if cpu == "wrong" and values:
            values[-1] += 1.0
        return Tensor(values, (rows, cols), self.device, self.dtype)

    def sum(self):
        """Sum of all elements, as a 0-d tensor."""
        self._launch()
        return Tensor([math.fsum(self._data)], (), self.device, self.dtype)

    def float(self):
        """A float32 copy."""
        self._launch()
        return Tensor(self._data, self.shape, self.device, float32)

    def item(self):
        """The value of a one-element tensor."""
        if self.numel() != 1:
            raise RuntimeError("a Tensor with %d elements cannot be converted to Scalar" % self.numel())
        return self._data[0]

    def tolist(self):
        """The values as a flat list (the fake keeps no nesting)."""
        return list(self._data)

    def to(self, device):
        """A copy on another device."""
        target = _device(device)
        if target.type == "cuda":
            _fake.check_cuda_context(target.index)
        return Tensor(self._data, self.shape, target, self.dtype)

    def cpu(self):
        """A copy in host memory."""
        return Tensor(self._data, self.shape, "cpu", self.dtype)

    def __repr__(self):
        extra = "" if self.device.type == "cpu" else ", device='%s'" % self.device
        return "tensor(%s%s)" % (self._data if self.shape else self._data[0], extra)


def _new(shape, value, device, dtype):
    target = _device(device or "cpu")
    if target.type == "cuda":
        _fake.check_cuda_context(target.index)
    return Tensor([value] * shape.numel(), shape, target, dtype or float32)


def _nested(data):
    """(flat values, shape) of a number or nested lists."""
    if isinstance(data, (list, tuple)):
        parts = [_nested(item) for item in data]
        shapes = {shape for _values, shape in parts}
        if len(shapes) > 1:
            raise ValueError("expected sequence of equal length lists")
        inner = shapes.pop() if shapes else ()
        return [x for values, _shape in parts for x in values], (len(data),) + inner
    return [float(data)], ()


def tensor(data, dtype=None, device=None):
    """A tensor holding ``data`` (a number or nested lists)."""
    values, shape = _nested(data)
    target = _device(device or "cpu")
    if target.type == "cuda":
        _fake.check_cuda_context(target.index)
    return Tensor(values, shape, target, dtype or float32)


def ones(*shape, device=None, dtype=None):
    """A tensor of ones."""
    return _new(_shape(shape), 1.0, device, dtype)


def zeros(*shape, device=None, dtype=None):
    """A tensor of zeros."""
    return _new(_shape(shape), 0.0, device, dtype)


def empty_like(tensor):
    """An uninitialised tensor shaped like `tensor` (zeros here)."""
    return _new(tensor.shape, 0.0, tensor.device, tensor.dtype)
