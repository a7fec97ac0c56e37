"""Which `torch.distributed` functions are collectives, where each takes its payload and group, and the frame
of torch's `_exception_logger` to call past (see `_collectives`)."""

from __future__ import annotations

import dis
import functools
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch.distributed import distributed_c10d

# The argument whose tensors count as a collective's bytes: the first of these in its signature.
PAYLOAD_NAMES = ("tensor", "input", "input_tensor", "input_tensor_list", "input_list", "tensors")
OP_PREFIXES = (("all_reduce", "all_reduce"), ("reduce_scatter", "reduce_scatter"), ("all_gather", "all_gather"),
               ("all_to_all", "all_to_all"), ("broadcast", "broadcast"), ("isend", "send_recv"),
               ("irecv", "send_recv"), ("send", "send_recv"), ("recv", "send_recv"), ("reduce", "other"),
               ("gather", "other"), ("scatter", "other"))


@dataclass(frozen=True, slots=True)
class CollectiveSignature:
    """Where a collective function takes its payload and its group, and the SPEC `op` it counts as."""

    op: str
    payload_name: str | None
    payload_index: int
    group_index: int


def op_of(name: str) -> str | None:
    """The SPEC `op` a `torch.distributed` function name stands for, or None for a non-collective."""
    if "barrier" in name.split("_"):
        return "barrier"
    return next((op for prefix, op in OP_PREFIXES if name == prefix or name.startswith(prefix + "_")), None)


def collective_functions(module: Any = distributed_c10d) -> dict[str, tuple[Callable[..., Any], CollectiveSignature]]:
    """The collectives of `module` (torch's `distributed_c10d`) that do the work themselves, by name."""
    found: dict[str, Callable[..., Any]] = {}
    for name in getattr(module, "__all__", ()):
        fn = vars(module).get(name)
        if type(fn) is types.FunctionType and op_of(name) is not None and "group" in inspect.signature(fn).parameters:
            found[name] = getattr(fn, "__trainmon_original__", fn)
    out = {}
    for name, fn in found.items():
        globals_used = {i.argval for i in dis.get_instructions(inspect.unwrap(fn)) if i.opname == "LOAD_GLOBAL"}
        if not globals_used & (found.keys() - {name}):  # a forwarder is counted by the one it calls
            out[name] = (fn, _signature(fn, op_of(name) or "other"))
    return out


def _signature(fn: Callable[..., Any], op: str) -> CollectiveSignature:
    params = list(inspect.signature(fn).parameters)
    payload = next((p for p in params if p in PAYLOAD_NAMES), None)
    return CollectiveSignature(op, payload, params.index(payload) if payload else 10**6, params.index("group"))


EXCEPTION_LOGGER_CODE: types.CodeType | None
try:  # private to torch, so looked for, not assumed
    from torch.distributed.c10d_logger import _exception_logger
    EXCEPTION_LOGGER_CODE = _exception_logger(lambda: None).__code__  # the code of every function it wraps
except (ImportError, AttributeError, TypeError):
    EXCEPTION_LOGGER_CODE = None

ExceptionLog = Callable[[Exception, tuple[Any, ...], dict[str, Any]], None]


def past_exception_logger(fn: Callable[..., Any]) -> tuple[Callable[..., Any], ExceptionLog | None]:
    """The function under torch's `_exception_logger` frame and a log of exceptions as that frame
    logs them; `fn` and None where that frame is not its outer one."""
    inner = getattr(fn, "__wrapped__", None)
    if inner is None or EXCEPTION_LOGGER_CODE is None or getattr(fn, "__code__", None) is not EXCEPTION_LOGGER_CODE:
        return fn, None
    return inner, functools.partial(_log_as_torch, fn.__name__)


def _log_as_torch(name: str, error: Exception, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run torch's `_exception_logger` itself around a function of the same name that raises `error`
    again, so the log has what it would have had; `error` keeps its own traceback."""
    def failed(*_args: Any, **_kwargs: Any) -> Any:
        raise error

    failed.__name__ = name
    traceback = error.__traceback__
    try:
        _exception_logger(failed)(*args, **kwargs)
    except Exception as raised:
        if raised is not error:  # logging failed: raised as under torch's frame
            raise
    error.with_traceback(traceback)
