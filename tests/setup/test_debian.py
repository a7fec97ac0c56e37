"""The pure parts of tests/setup/debian.py: apt sources, pip configuration, mount points, README blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.setup.debian import (
    debian_mirror,
    mounts_under,
    pip_certificate,
    pip_config_paths,
    pip_referenced_files,
    readme_blocks,
)

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.test/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.test/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_source_gives_the_mirror_serving_bookworm() -> None:
    assert "http://mirror.test/debian" == debian_mirror([("debian.sources", DEB822)])


def test_one_line_source_with_options_and_comments() -> None:
    text = ("# deb http://commented.test/debian bookworm main\n"
            "deb-src http://src.test/debian bookworm main\n"
            "deb [arch=amd64 signed-by=/k.gpg] http://security.test/debian-security bookworm-security main\n"
            "deb [arch=amd64] http://one.test/debian bookworm main contrib\n")

    assert "http://one.test/debian" == debian_mirror([("sources.list", text)])


def test_disabled_and_deb_src_stanzas_are_skipped_and_order_is_kept() -> None:
    disabled = "Types: deb\nURIs: http://off.test/debian\nSuites: bookworm\nEnabled: no\n"
    source_only = "Types: deb-src\nURIs: http://src.test/debian\nSuites: bookworm\n"
    continued = "Types: deb\nURIs:\n http://second.test/debian\nSuites: bookworm\n"

    assert "http://second.test/debian" == debian_mirror(
        [("a.sources", disabled), ("b.sources", source_only), ("c.sources", continued), ("d.sources", DEB822)])


def test_no_source_for_the_suite_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no apt source serves 'bookworm'"):
        debian_mirror([("nodesource.sources", "Types: deb\nURIs: https://node.test/x\nSuites: nodistro\n")])


def test_pip_configuration_files_and_what_they_name() -> None:
    config = "[global]\ncert = /etc/ssl/ca.crt\nfind-links = /opt/wheels\nconstraint = /etc/xdg/pip/c.txt\n"
    env = {"PIP_CERT": "/env/ca.crt", "PIP_FIND_LINKS": "/opt/wheels", "PIP_CONFIG_FILE": "/x/pip.conf"}

    assert {"/etc/ssl/ca.crt", "/etc/xdg/pip/c.txt", "/env/ca.crt"} == pip_referenced_files([config], env)
    assert "/env/ca.crt" == pip_certificate([config], env)
    assert "/user/ca.crt" == pip_certificate([config, "[install]\ncert = /user/ca.crt\n"], {})
    assert pip_certificate(["[global]\ntimeout = 60\n"], {}) is None
    assert [Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf"), Path("/r/.pip/pip.conf"),
            Path("/r/.config/pip/pip.conf"), Path("/x/pip.conf")] == pip_config_paths(env, Path("/r"))


def test_mounts_under_a_root() -> None:
    mountinfo = ("22 1 0:21 / /proc rw - proc proc rw\n"
                 "40 30 0:5 / /tmp/r/dev rw - devtmpfs udev rw\n"
                 "41 30 0:6 / /tmp/rootfs2 rw - tmpfs t rw\n")

    assert ["/tmp/r/dev"] == mounts_under(Path("/tmp/r"), mountinfo)


def test_readme_blocks_are_the_sh_fences_in_order() -> None:
    text = "x\n```sh\napt-get update\ntrainmon serve\n```\n```python\nno\n```\n```sh\nbash scripts/test.sh\n```\n"

    assert ["apt-get update\ntrainmon serve\n", "bash scripts/test.sh\n"] == readme_blocks(text)
