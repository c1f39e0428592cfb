"""offloadkit's typed errors, as Python exceptions.

They mirror the C++ exceptions of ``offloadkit/error.hpp`` and the status codes of the plugin ABI,
so that a property that expects a type still recognises it when the implementation is Python:

=================  ==========================  ============================================
Python             C++ (``offloadkit::``)      raised for
=================  ==========================  ============================================
``OutOfRange``     ``out_of_range``            a value outside its valid range
``StateError``     ``state_error``             a call not valid in the object's state
``LogicError``     ``logic_error``             another precondition the caller broke
``OutOfMemory``    ``out_of_memory``           memory that is not available
``InjectedFault``  ``injected_fault``          a fault planted by offloadkit's injection
``CudaError``      ``cuda_error``              a CUDA runtime or driver call that failed
``PlatformError``  ``runtime_error``           another platform failure
=================  ==========================  ============================================

Built-in exceptions map too: ``IndexError`` and ``KeyError`` are out of range, ``MemoryError`` is
out of memory, ``ValueError`` and ``TypeError`` are logic errors, ``NotImplementedError`` is an
unsupported operation, and anything else is a runtime error. The executor lent to an
implementation raises these classes, so an injected fault that an implementation lets through
keeps its type all the way back to the property.

Messages should name the bad value and the valid range, as offloadkit's own do:
``raise OutOfRange(f"layer = {layer} is outside [0, {limit})")``.
"""


class Error(Exception):
    """Base of every offloadkit error."""


class LogicError(Error, ValueError):
    """A precondition or invariant the caller broke (bad argument, bad state)."""


class OutOfRange(LogicError, IndexError):
    """A value outside its valid range; the message names the value and the range."""


class StateError(LogicError):
    """The call is not valid in the object's current state (pause twice, use after release...)."""


class PlatformError(Error, RuntimeError):
    """A failure reported by the platform (CUDA, the OS) or by fault injection."""


class CudaError(PlatformError):
    """A CUDA runtime or driver call failed; ``code`` is its cudaError_t / CUresult."""

    def __init__(self, message="", code=0):
        super().__init__(message)
        self.code = int(code)


class InjectedFault(PlatformError):
    """A fault planted by offloadkit's fault-injection adaptor."""


class OutOfMemory(Error, MemoryError):
    """An allocation failed because the memory it asked for is not available."""


def with_context(error, context):
    """A copy of ``error`` (same type) whose message starts with ``context``.

    For adding what an operation was doing when a call it made failed, without losing the type
    the properties look for::

        try:
            executor.copy(host, tensor, tensor.nbytes, stream)
        except Error as e:
            raise with_context(e, f"offload: copy of tensor {i} failed") from e
    """
    message = f"{context}: {error}"
    if isinstance(error, CudaError):
        return CudaError(message, error.code)
    try:
        return type(error)(message)
    except TypeError:
        # An exception class whose constructor takes other arguments: keep its offloadkit base.
        for base in (OutOfRange, StateError, LogicError, OutOfMemory, InjectedFault, PlatformError):
            if isinstance(error, base):
                return base(message)
        return Error(message)
