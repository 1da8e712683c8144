"""Exceptions: one class per wgml_status, all under wgml.Error, each carrying the library's
message. Each also derives from the Python built-in exception that fits, so code written
against those (`except ValueError`) works too."""
import re

import numpy as np

from ._ffi import ffi, lib


class Error(Exception):
    """A call into libwgml failed. `status` is the wgml_status number, `status_name` the
    library's name for it (wgml_status_name, e.g. "WGML_ERROR_SHAPE"), the message the
    library's own."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status
        self.message = message

    @property
    def status_name(self):
        return _status_name(self.status) if self.status is not None else None


class InvalidArgumentError(Error, ValueError):
    """NULL, a bad dimension or axis, a wrong host length, a number out of range."""


class AxisError(InvalidArgumentError, getattr(getattr(np, "exceptions", np), "AxisError")):
    """An axis out of range: NumPy's AxisError (an IndexError and a ValueError) and a
    wgml.InvalidArgumentError, with a message naming the axis and the tensor's dimensions."""

    def __init__(self, axis, ndim, what=None):
        Error.__init__(self, "%saxis %d is out of bounds for a tensor of dimension %d"
                       % (what + ": " if what else "", axis, ndim), lib.WGML_ERROR_INVALID_ARGUMENT)
        self.axis, self.ndim = axis, ndim

    def __str__(self):
        return self.message


class DTypeError(InvalidArgumentError, TypeError):
    """An operand of a dtype the op does not take (the library reports it as an invalid
    argument; its message names the operand and both dtypes)."""


class ShapeError(Error, ValueError):
    """Shapes that do not fit the op."""


class SizeOverflowError(Error, OverflowError):
    """An element count or byte size that overflows."""


class LimitError(Error):
    """Past an adapter limit (buffer size, binding size, loop trips)."""


class NoAdapterError(Error):
    """No WebGPU adapter found."""


class DeviceError(Error):
    """The device could not be created."""


class DeviceLostError(DeviceError):
    """The device was lost; the context is unusable."""


class OutOfMemoryError(Error, MemoryError):
    """Host or GPU allocation failed."""


class ValidationError(Error):
    """WebGPU rejected a command (a bug in wgml)."""


class ContextError(Error, ValueError):
    """A tensor from another context, or from a context already closed."""


class NotFoundError(Error, LookupError):
    """Unknown name."""


class ExistsError(Error, ValueError):
    """Duplicate name."""


class FileError(Error, OSError):
    """A file could not be opened, read or written."""

    def __init__(self, message, status=None):
        # OSError's own constructor would read a 2-tuple as (errno, strerror): pass one string
        Error.__init__(self, message, status)


class FormatError(Error, ValueError):
    """A file is corrupt, truncated or of the wrong kind."""


class UnsupportedError(Error, NotImplementedError):
    """The adapter or build lacks what was asked."""


_BY_STATUS = {
    lib.WGML_ERROR_INVALID_ARGUMENT: InvalidArgumentError,
    lib.WGML_ERROR_SHAPE: ShapeError,
    lib.WGML_ERROR_OVERFLOW: SizeOverflowError,
    lib.WGML_ERROR_LIMIT: LimitError,
    lib.WGML_ERROR_NO_ADAPTER: NoAdapterError,
    lib.WGML_ERROR_DEVICE: DeviceError,
    lib.WGML_ERROR_DEVICE_LOST: DeviceLostError,
    lib.WGML_ERROR_OUT_OF_MEMORY: OutOfMemoryError,
    lib.WGML_ERROR_VALIDATION: ValidationError,
    lib.WGML_ERROR_CONTEXT: ContextError,
    lib.WGML_ERROR_NOT_FOUND: NotFoundError,
    lib.WGML_ERROR_EXISTS: ExistsError,
    lib.WGML_ERROR_IO: FileError,
    lib.WGML_ERROR_FORMAT: FormatError,
    lib.WGML_ERROR_UNSUPPORTED: UnsupportedError,
}
for _status, _cls in _BY_STATUS.items():
    _cls.status = _status
DTypeError.status = lib.WGML_ERROR_INVALID_ARGUMENT

# The library's wordings for an operand of the wrong dtype ("add: operand 1 is i32; add takes
# f32 there", "embedding: the indices are f32; they must be i32", "cast: dtype 7 is not a
# wgml_dtype"). Matching one only refines InvalidArgumentError into its subclass.
_DTYPE_MESSAGE = re.compile(r"\b(is|are) (f32|i32)\b|\b(takes|must be) (f32|i32)\b|\bdtype\b")


def _status_name(status):
    return ffi.string(lib.wgml_status_name(status)).decode()


def error_for(status, message):
    """The exception for a failing status and its message."""
    cls = _BY_STATUS.get(status, Error)
    if cls is InvalidArgumentError and _DTYPE_MESSAGE.search(message):
        cls = DTypeError
    if not message:
        message = _status_name(status)
    return cls(message, status)
