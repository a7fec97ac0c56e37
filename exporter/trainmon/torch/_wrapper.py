"""The source of each collective's wrapper, made from one template with the function's own parameters."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

from trainmon.torch._discovery import CollectiveSignature

# Each collective's wrapper is made from this template with the function's own parameters (as
# dataclasses and attrs make `__init__`): no `*args/**kwargs` packing, and the payload and group are
# plain names: a third less time per blocking collective than one generic wrapper. The hot path
# is `RankState.issue` and `complete` inlined, no lock, and the group as torch got it (`settle` finds
# its numbers, and drops a group this rank is not a member of).
WRAPPER_TEMPLATE = """
def {name}({parameters}):
    if suppressing and get_ident() in suppressing:
        calls = coalescing.get(get_ident())
        if calls is not None:  # inside a coalescing manager: launched at its exit
            calls.append(({op!r}, {payload}))
        return fn({arguments})
    try:
        payload = {payload}
        nbytes = payload.nbytes if type(payload) is tensor_type else nbytes_of(payload)
        event = cuda_start({async_call}) if spans is not None and is_cuda(payload) else None
        if len(opened) >= MAX_UNSETTLED:  # nobody has read for a while (no reporter yet)
            settle()
        t0 = perf_counter()
        entry = [{group}, {op!r}, nbytes, t0, None, 0.0]
        opened.append(entry)
    except Captured:  # replayed without Python: counted as captured, once
        return fn({arguments})
    except Exception:
        tally.errors += 1
        return fn({arguments})
    try:
        result = call({arguments})
    except BaseException as error:
        failed(entry, error, {by_name})
        raise
    if result is None and event is None:  # CPU, blocking: done when it returns; `blocked` is stored first
        entry[BLOCKED] = entry[SECONDS] = perf_counter() - t0
    elif isinstance(result, work_types):  # async: done when seen done
        pending[id(result)] = (result, entry, event)
        if work_type.wait is not patched_wait:
            intercept(True)
        if len(pending) > MAX_PENDING_WORKS:  # never waited on: forget the oldest
            forget(next(iter(pending)))
    else:
        finished(result, entry, event)
    return result
"""


def _template_names() -> frozenset[str]:
    """Every name the template's function uses: a parameter called so would shadow it."""
    fields = dict(parameters="", arguments="", by_name="{}", payload="None", group="None", op="", async_call="False")
    code = compile(WRAPPER_TEMPLATE.format(name="wrapper", **fields), "<template>", "exec")
    (function,) = (c for c in code.co_consts if isinstance(c, types.CodeType))
    return frozenset(function.co_names + function.co_varnames)


TEMPLATE_NAMES = _template_names()


def wrapper_source(fn: Callable[..., Any], signature: CollectiveSignature) -> tuple[str, dict[str, Any]]:
    """The wrapper's source for `fn` and the defaults it names; `*args, **kwargs` where `fn` takes
    anything but plain parameters, or one whose name the template uses."""
    parameters = inspect.signature(fn).parameters.values()
    plain = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
    plain = plain and not {p.name for p in parameters} & TEMPLATE_NAMES
    async_call = _async_call(fn, {p.name for p in parameters}, plain)
    if plain:
        names = [p.name for p in parameters]
        defaults = {f"default_{p.name}": p.default for p in parameters if p.default is not inspect.Parameter.empty}
        fields = dict(
            parameters=", ".join(f"{n}=default_{n}" if f"default_{n}" in defaults else n for n in names),
            arguments=", ".join(names), by_name="{" + ", ".join(f"{n!r}: {n}" for n in names) + "}",
            payload=signature.payload_name or "None", group="group")
    else:
        defaults = {}
        fields = dict(
            parameters="*args, **kwargs", arguments="*args, **kwargs", by_name="kwargs, args",
            payload=f"args[{signature.payload_index}] if len(args) > {signature.payload_index} "
                    f"else kwargs.get({signature.payload_name or ''!r})",
            group=f"args[{signature.group_index}] if len(args) > {signature.group_index} else kwargs.get('group')")
    return WRAPPER_TEMPLATE.format(name=fn.__name__, op=signature.op, async_call=async_call, **fields), defaults


def _async_call(fn: Callable[..., Any], parameters: set[str], plain: bool) -> str:
    """The wrapper's expression for "this call returns a work to wait on": its `async_op` argument, True for
    `isend`/`irecv`, False otherwise. A CUDA call that says so records no start event (its `wait()` gets a
    pair); one passed positionally to a `*args` wrapper records one it does not need."""
    if "async_op" in parameters:
        return "async_op" if plain else "kwargs.get('async_op', False)"
    return str(fn.__name__ in ("isend", "irecv"))
