from __future__ import annotations

from pathlib import Path

from tests.helpers.trees import break_file_as_dangling_symlink, break_file_as_directory, write
from trainmon.parsers.infiniband import parse_counter
from trainmon.sysfs.attributes import AttributeReader


def test_values_and_skips_are_relative_to_the_directory(tmp_path: Path) -> None:
    write(tmp_path / "dev" / "count", "12\n")
    write(tmp_path / "dev" / "bad", "N/A (no PMA)\n")
    write(tmp_path / "dev" / "label", "a\x00b\n")
    break_file_as_directory(tmp_path / "dev" / "dir")
    reader = AttributeReader(str(tmp_path / "dev"), "dev")

    assert 12 == reader.parsed("count", parse_counter)
    assert reader.parsed("bad", parse_counter) is None
    assert reader.text("dir") is None
    assert reader.name("label") is None
    assert "a\x00b" == reader.text("label")  # not a label value, but text all the same
    assert ["dev/bad: unparsable 'N/A (no PMA)'", "dev/dir: EISDIR",
            "dev/label: not a name 'a\\x00b'"] == reader.skipped


def test_an_optional_attribute_may_be_missing_but_not_broken(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    break_file_as_dangling_symlink(tmp_path / "dev" / "hca_type")
    break_file_as_directory(tmp_path / "dev" / "link_layer")
    reader = AttributeReader(str(tmp_path / "dev"), "dev")

    assert reader.name("hca_type", optional=True) is None
    assert reader.name("link_layer", optional=True) is None
    assert [] == reader.entries("hw_counters", optional=True)
    assert [] == reader.entries("counters")
    assert ["dev/link_layer: EISDIR", "dev/counters: ENOENT"] == reader.skipped
