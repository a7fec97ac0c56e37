"""One sysfs directory's attributes, read the one way trainmon reads them, with what was skipped."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from trainmon.roots import Unavailable, list_directory, read_attribute, read_name

T = TypeVar("T")


class AttributeReader:
    """Reads attributes relative to `directory`, noting each skip as `<name>/<relative>: <why>`.

    `optional` attributes may be absent on some hardware (an hfi1 has no hca_type): a missing one is
    not listed. Paths are plain strings: a cycle reads ~40 files per InfiniBand port, and pathlib's
    object churn was half of that collector's CPU time.
    """

    def __init__(self, directory: str, name: str) -> None:
        self._directory = f"{directory}/"
        self._name = name
        self.skipped: list[str] = []

    def text(self, relative: str, optional: bool = False) -> str | None:
        return self._read(relative, read_attribute, optional)

    def name(self, relative: str, optional: bool = False) -> str | None:
        """An attribute that becomes a label value (`read_name`)."""
        return self._read(relative, read_name, optional)

    def parsed(self, relative: str, parse: Callable[[str], T | None]) -> T | None:
        text = self.text(relative)
        if text is None:
            return None
        value = parse(text)
        if value is None:
            self._skip(relative, f"unparsable {text[:40]!r}")
        return value

    def entries(self, relative: str, optional: bool = False) -> list[str]:
        entries = list_directory(self._directory + relative)
        if isinstance(entries, Unavailable):
            self._unavailable(relative, entries, optional)
            return []
        return entries

    def _read(self, relative: str, read: Callable[[str], str | Unavailable], optional: bool) -> str | None:
        text = read(self._directory + relative)
        if isinstance(text, Unavailable):
            self._unavailable(relative, text, optional)
            return None
        return text

    def _unavailable(self, relative: str, why: Unavailable, optional: bool) -> None:
        if not (optional and why.missing):
            self._skip(relative, why.why)

    def _skip(self, relative: str, why: str) -> None:
        self.skipped.append(f"{self._name}/{relative}: {why}")
