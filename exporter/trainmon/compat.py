"""Every place trainmon relies on a dependency's internals, and what it relies on.

`tests/test_compat.py` fails loudly when an installed version changes one of them, and
pyproject.toml bounds these dependencies below the next release that may.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from prometheus_client.openmetrics import exposition as openmetrics


def use_nvml_library(library: object) -> None:
    """Make pynvml call `library` (a stand-in for `libnvidia-ml.so.1`) from now on.

    Relies on nvidia-ml-py keeping the loaded library in the module global `pynvml.nvmlLib`, read
    with `getattr(nvmlLib, "nvml…")` for each C function, and caching what it found in the dict
    `pynvml._nvmlGetFunctionPointer_cache`, which must be emptied with the swap. pynvml is imported here,
    not at the top: exposition.py imports this module, and serving HTTP must not load NVML's bindings.
    """
    import pynvml

    if pynvml.nvmlLib is not library:
        pynvml.nvmlLib = library
        pynvml._nvmlGetFunctionPointer_cache.clear()


def without_name_escaping(encoder: Callable[..., bytes]) -> Callable[..., bytes]:
    """The same OpenMetrics bytes at half the cost, for our names.

    With `escaping=underscores` (what Prometheus asks for) prometheus_client rewrites every sample
    name character by character, which is half of rendering. Every trainmon name already fits the
    legacy character set (`families.py` builds them; a test checks the output is identical), so the
    rewrite changes nothing and `allow-utf-8`, which only escapes label values the same way, gives
    the same output.

    Relies on prometheus_client's `choose_encoder` returning `functools.partial(generate_latest,
    escaping=...)` with the `UNDERSCORES`/`ALLOWUTF8` constants of `openmetrics.exposition`;
    anything else is returned unchanged (correct, only slower).
    """
    if (isinstance(encoder, functools.partial) and encoder.func is openmetrics.generate_latest
            and encoder.keywords.get("escaping") == openmetrics.UNDERSCORES):
        return functools.partial(encoder.func, *encoder.args, **{**encoder.keywords,
                                                                 "escaping": openmetrics.ALLOWUTF8})
    return encoder


# `trainmon.http.server.TrainmonServer` subclasses `uvicorn.Server` and relies on: `main_loop()`, the
# coroutine `_serve` awaits between startup and shutdown (ours waits on an event instead of polling
# every 0.1 s); `on_tick(counter) -> bool`, which refreshes the Date header and says whether to exit;
# and `servers`, the asyncio servers `startup` created (ours deepens their backlog and replaces them
# on SIGHUP to change TLS).
UVICORN_SERVER_INTERNALS = ("main_loop", "on_tick", "servers")
