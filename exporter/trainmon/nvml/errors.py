"""How NVML failures are classified: absent value, failed GPU, or a GPU that needs a re-init."""

from __future__ import annotations

import pynvml

# Codes that mean "this GPU or driver does not provide the value": the series is absent, the GPU up.
ABSENT = frozenset({
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_NO_DATA,
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
})

# Of those, the codes that mean the function itself is missing: FUNCTION_NOT_FOUND where the driver
# predates it, NOT_SUPPORTED where this GPU or mode lacks it. They hold until the next re-initialisation;
# the others (NO_PERMISSION, NO_DATA, ...) can pass, so the value is asked for again.
MISSING = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})

# Codes after which the handles are useless: shut NVML down and initialise it again (SPEC §7).
NEEDS_REINIT = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED})

# Everything pynvml raises: NVMLError, and the plain Exception its process wrappers raise when
# the `_v3` symbol is missing (an old driver).
NVML_FAILURES = (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError)


def is_absent(exc: BaseException) -> bool:
    if isinstance(exc, pynvml.NVMLLibraryMismatchError):
        return True
    return isinstance(exc, pynvml.NVMLError) and exc.value in ABSENT


def is_missing(exc: BaseException) -> bool:
    return isinstance(exc, pynvml.NVMLError) and exc.value in MISSING


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, pynvml.NVMLError) and exc.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND


def is_no_driver(exc: BaseException) -> bool:
    """No libnvidia-ml, or no NVIDIA kernel driver loaded: on a node without GPUs, that is all NVML says."""
    return isinstance(exc, pynvml.NVMLError_LibraryNotFound | pynvml.NVMLError_DriverNotLoaded)


def needs_reinit(exc: BaseException) -> bool:
    return isinstance(exc, pynvml.NVMLError) and exc.value in NEEDS_REINIT


def is_lost(exc: BaseException) -> bool:
    return isinstance(exc, pynvml.NVMLError) and exc.value == pynvml.NVML_ERROR_GPU_IS_LOST


def is_reset_required(exc: BaseException) -> bool:
    return isinstance(exc, pynvml.NVMLError) and exc.value == pynvml.NVML_ERROR_RESET_REQUIRED


def nvml_error_line(exc: BaseException) -> str:
    """One line: `NVMLError_GpuIsLost: GPU is lost`."""
    return f"{type(exc).__name__}: {exc}"
