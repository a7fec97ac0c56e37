"""The dependency internals `trainmon.compat` names are still there and still behave as it relies on."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator

import pynvml
import pytest
import uvicorn
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics import exposition as openmetrics

from trainmon.compat import UVICORN_SERVER_INTERNALS, use_nvml_library, without_name_escaping

OPENMETRICS_UNDERSCORES = "application/openmetrics-text; version=1.0.0; escaping=underscores"


class Library:
    """A library pynvml can resolve C functions on: attributes named like them."""

    def __init__(self, tag: str) -> None:
        self.nvmlSystemGetDriverVersion = functools.partial(str, tag)


@pytest.fixture
def restored_library() -> Iterator[None]:
    before = pynvml.nvmlLib
    yield
    use_nvml_library(before)


@pytest.mark.usefixtures("restored_library")
def test_pynvml_resolves_functions_on_the_library_we_swap_in_and_forgets_the_previous_one() -> None:
    first, second = Library("first"), Library("second")

    use_nvml_library(first)
    assert pynvml._nvmlGetFunctionPointer("nvmlSystemGetDriverVersion")() == "first"
    use_nvml_library(second)
    assert pynvml._nvmlGetFunctionPointer("nvmlSystemGetDriverVersion")() == "second"


def test_prometheus_client_chooses_a_partial_of_generate_latest_with_an_escaping_keyword() -> None:
    encoder, _ = choose_encoder(OPENMETRICS_UNDERSCORES)
    faster = without_name_escaping(encoder)

    assert isinstance(encoder, functools.partial) and encoder.func is openmetrics.generate_latest
    assert encoder.keywords["escaping"] == openmetrics.UNDERSCORES
    assert isinstance(faster, functools.partial) and faster.keywords["escaping"] == openmetrics.ALLOWUTF8


def test_uvicorn_server_still_has_the_loop_hooks_we_override() -> None:
    server = uvicorn.Server
    serve_source = inspect.getsource(server._serve)

    assert UVICORN_SERVER_INTERNALS == ("main_loop", "on_tick", "servers")
    assert inspect.iscoroutinefunction(server.main_loop) and "await self.main_loop()" in serve_source
    assert inspect.iscoroutinefunction(server.on_tick)
    assert list(inspect.signature(server.on_tick).parameters) == ["self", "counter"]
    assert "self.servers = [" in inspect.getsource(server.startup)
    assert "for server in self.servers" in inspect.getsource(server.shutdown)
