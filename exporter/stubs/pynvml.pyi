# nvidia-ml-py ships no type information and PyPI has no stubs for it. This partial stub types the
# return codes and value-type tags trainmon compares and returns (plain ints in pynvml.py) and the
# error class it catches; every other name stays Any through the module `__getattr__`.
from typing import Any

NVML_SUCCESS: int
NVML_ERROR_UNINITIALIZED: int
NVML_ERROR_INVALID_ARGUMENT: int
NVML_ERROR_NOT_SUPPORTED: int
NVML_ERROR_NO_PERMISSION: int
NVML_ERROR_INSUFFICIENT_SIZE: int
NVML_ERROR_TIMEOUT: int
NVML_ERROR_FUNCTION_NOT_FOUND: int
NVML_ERROR_GPU_IS_LOST: int
NVML_ERROR_RESET_REQUIRED: int
NVML_ERROR_NO_DATA: int
NVML_ERROR_ARGUMENT_VERSION_MISMATCH: int

NVML_VALUE_TYPE_DOUBLE: int
NVML_VALUE_TYPE_UNSIGNED_INT: int
NVML_VALUE_TYPE_UNSIGNED_LONG: int
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: int
NVML_VALUE_TYPE_SIGNED_LONG_LONG: int
NVML_VALUE_TYPE_SIGNED_INT: int
NVML_VALUE_TYPE_UNSIGNED_SHORT: int

class NVMLError(Exception):
    value: int

def __getattr__(name: str) -> Any: ...
