"""A fresh Debian 12 root filesystem for the set-up tests: the mirror apt already uses, debootstrap, a chroot.

Parsing (apt sources, pip configuration, README blocks) is pure; the I/O around it takes its roots as
arguments. Mounts are made only inside a private mount namespace (`unshare --mount`), so the kernel
removes them when the last process in it exits, whatever the test did: nothing stays mounted on the host.
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
# pytest-timeout counts a test's fixtures too: the first test of tests/setup/test_container_image.py waits for
# the session's debootstrap (up to 3.5 min on a cold, loaded 2-core machine) and then builds the image (about
# 5 min cold), so the files that build from nothing get this budget instead of the 300 s of other `slow` tests.
COLD_BUILD_TIMEOUT_S = 1200


@dataclass(frozen=True)
class AptSource:
    """One `deb` entry: the archive's URI and the suites it serves."""

    uri: str
    suites: tuple[str, ...]


def one_line_sources(text: str) -> list[AptSource]:
    """`deb [options] URI SUITE COMPONENT...` lines (sources.list, *.list)."""
    found: list[AptSource] = []
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
        if len(words) >= 3 and words[0] == "deb":
            found.append(AptSource(words[1], (words[2],)))
    return found


def deb822_sources(text: str) -> list[AptSource]:
    """deb822 stanzas (*.sources): `Types`, `URIs`, `Suites`, `Enabled`; comment lines start with `#`."""
    found: list[AptSource] = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:  # a continuation line
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
            suites = tuple(fields.get("suites", "").split())
            found.extend(AptSource(uri, suites) for uri in fields.get("uris", "").split())
    return found


def debian_mirror(source_files: Iterable[tuple[str, str]], suite: str = SUITE) -> str:
    """The URI of the first `deb` source serving `suite`, from (file name, text) pairs in apt's order."""
    for name, text in source_files:
        parse = deb822_sources if name.endswith(".sources") else one_line_sources
        for source in parse(text):
            if suite in source.suites:
                return source.uri
    raise ValueError(f"no apt source serves {suite!r}: debootstrap needs a Debian mirror")


def apt_source_files(etc_apt: Path) -> list[tuple[str, str]]:
    """sources.list, then sources.list.d/*.list and *.sources by name, as apt reads them."""
    files = [etc_apt / "sources.list"] if (etc_apt / "sources.list").is_file() else []
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources"))
    return [(f.name, f.read_text()) for f in files]


def readme_blocks(text: str) -> list[str]:
    """The README's ```sh blocks, in order."""
    return re.findall(r"```sh\n(.*?)```", text, re.S)


PIP_PATH_KEYS = ("cert", "client-cert", "constraint", "requirement")


def pip_config_paths(env: Mapping[str, str], home: Path, xdg_config_dirs: str = "/etc/xdg") -> list[Path]:
    """Where pip looks for configuration files (site, user, PIP_CONFIG_FILE), whether or not they exist."""
    paths = [Path(d) / "pip" / "pip.conf" for d in xdg_config_dirs.split(":") if d]
    paths += [Path("/etc/pip.conf"), home / ".pip" / "pip.conf", home / ".config" / "pip" / "pip.conf"]
    if env.get("PIP_CONFIG_FILE"):
        paths.append(Path(env["PIP_CONFIG_FILE"]))
    return paths


def pip_referenced_files(config_texts: Iterable[str], env: Mapping[str, str]) -> set[str]:
    """Absolute paths of the files pip's configuration points at (a CA bundle, a constraints file)."""
    values = [v for k, v in env.items() if k.removeprefix("PIP_").lower().replace("_", "-") in PIP_PATH_KEYS]
    for text in config_texts:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        values += [parser[s][k] for s in parser.sections() for k in parser[s] if k in PIP_PATH_KEYS]
    return {word for value in values for word in value.split() if word.startswith("/")}


def pip_certificate(config_texts: Iterable[str], env: Mapping[str, str]) -> str | None:
    """The CA bundle pip verifies with: PIP_CERT, else the last `cert` the configuration files set."""
    cert = None
    for text in config_texts:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        cert = next((parser[s]["cert"] for s in parser.sections() if "cert" in parser[s]), cert)
    return env.get("PIP_CERT", cert)


def host_pip_configs(env: Mapping[str, str], home: Path) -> list[Path]:
    return [p for p in pip_config_paths(env, home, env.get("XDG_CONFIG_DIRS", "/etc/xdg")) if p.is_file()]


def host_pip_files(env: Mapping[str, str], home: Path) -> list[Path]:
    """The pip configuration of this machine and the files it names, as far as they exist: a chroot with
    copies of them reaches the package index the way the host does (through a proxy's CA, say)."""
    configs = host_pip_configs(env, home)
    referenced = pip_referenced_files((p.read_text() for p in configs), env)
    return configs + sorted(Path(p) for p in referenced if Path(p).is_file())


def host_pip_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The PIP_* variables, which configure pip as much as its files do."""
    return {k: v for k, v in env.items() if k.startswith("PIP_")}


def debootstrap(target: Path, mirror: str, suite: str = SUITE) -> None:
    """A minimal Debian (`--variant=minbase`: Essential and apt, no Python) at `target`."""
    debootstrap_bin = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    result = subprocess.run([debootstrap_bin, "--variant=minbase", suite, str(target), mirror],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        log = target / "debootstrap" / "debootstrap.log"
        detail = log.read_text()[-3000:] if log.is_file() else result.stdout[-3000:]
        raise AssertionError(f"debootstrap failed ({result.returncode}): {result.stderr}\n{detail}")


def unpack(tarball: Path, destination: Path) -> Path:
    """A root filesystem of its own from the session's tarball."""
    destination.mkdir()
    subprocess.run(["tar", "-C", str(destination), "-xf", str(tarball)], check=True, timeout=300)
    return destination


def remove_rootfs(root: Path) -> None:
    """Delete an unpacked root filesystem, refusing while anything is mounted below it."""
    mounted = mounts_under(root, Path("/proc/self/mountinfo").read_text())
    if mounted:
        raise AssertionError(f"still mounted, not deleting {root}: {mounted}")
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=True, timeout=300)


def copy_into(root: Path, files: Iterable[Path]) -> None:
    """Copy host files to the same absolute paths under `root`."""
    for source in files:
        destination = root / source.relative_to("/")
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.unlink(missing_ok=True)  # a symlink there (resolv.conf) must not be written through
        shutil.copy2(source, destination)


def mounts_under(root: Path, mountinfo: str) -> list[str]:
    """Mount points at or below `root` in a /proc/self/mountinfo text (field 5 is the mount point)."""
    prefix = str(root.resolve())
    points = [line.split()[4] for line in mountinfo.splitlines() if len(line.split()) > 4]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


def chroot_command(root: Path, script: str) -> list[str]:
    """argv that runs `script` with `sh -ex` chrooted at `root`, with /proc, /sys and /dev mounted in a
    private mount namespace that dies with it."""
    mount_and_enter = (
        'mount -t proc proc "$0/proc" && mount -t sysfs sysfs "$0/sys" && mount --rbind /dev "$0/dev" '
        '&& exec chroot "$0" /bin/sh -ex -c "$1"'
    )
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", mount_and_enter,
            str(root), script]


def git_archive_into(repo: Path, destination: Path) -> None:
    """A clean copy of the committed checkout (HEAD): no build output, no virtual environment."""
    destination.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", "HEAD"], capture_output=True,
                             check=True, timeout=120).stdout
    subprocess.run(["tar", "-x", "-C", str(destination)], input=archive, check=True, timeout=120)


# Where the host's CA bundle for pip goes in the chroot: at its own path (/etc/ssl/certs/...) the
# ca-certificates package, which python3-venv pulls in, would replace it with Debian's own bundle.
CHROOT_PIP_CERT = "/root/host-pip-ca.pem"


def prepare_pip(root: Path, env: Mapping[str, str], home: Path) -> dict[str, str]:
    """Copy the host's pip configuration into the chroot; the PIP_* variables that go with it there."""
    copy_into(root, host_pip_files(env, home))
    pip_env = host_pip_environment(env)
    cert = pip_certificate((p.read_text() for p in host_pip_configs(env, home)), env)
    if cert and Path(cert).is_file():
        shutil.copy2(cert, root / CHROOT_PIP_CERT.lstrip("/"))
        pip_env["PIP_CERT"] = CHROOT_PIP_CERT
    return pip_env


def chroot_environment(port: int, pip_env: Mapping[str, str]) -> dict[str, str]:
    """A root login's environment in the chroot, the host's pip settings, and the port to listen on."""
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
            "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive", **pip_env,
            "TRAINMON_LISTEN": f"127.0.0.1:{port}"}
