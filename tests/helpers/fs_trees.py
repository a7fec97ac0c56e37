"""Synthetic procfs/sysfs trees with network file-system clients, built from the real samples in tests/fixtures/fs."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

FIXTURES = Path(__file__).parents[1] / "fixtures" / "fs"
LUSTRE_SAMPLE = FIXTURES / "lustre" / "proc" / "fs" / "lustre"
NFS_SAMPLE = FIXTURES / "procfs" / "proc" / "26231"
SAMPLE_SUPERBLOCK = "ffff88105db50000"
SAMPLE_FSNAME = "lustrefs"
PID = "26231"
LOCAL_MOUNTS = (
    "21 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro\n"
    "17 21 0:4 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
)


def lustre_mount_line(mount_point: str, fsname: str, mount_id: int = 300) -> str:
    return f"{mount_id} 21 0:{mount_id} / {mount_point} rw,relatime shared:{mount_id} - lustre " \
           f"172.20.20.5@o2ib:172.20.20.6@o2ib:/{fsname} rw,flock,lazystatfs\n"


def nfs_mount_line(mount_point: str, mount_id: int = 400) -> str:
    return f"{mount_id} 21 0:{mount_id} / {mount_point} rw,relatime shared:{mount_id} - nfs4 192.168.1.1:/srv/test " \
           "rw,vers=4.0,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=192.168.1.5,addr=192.168.1.1\n"


def copy_lustre_client(proc: Path, sys: Path, fsname: str, superblock: str, layout: str = "procfs") -> None:
    """The sample client's llite and seven OSCs as `fsname`-`superblock`, in the ≤ 2.10 (`procfs`) or
    2.12+ (`debugfs`: stats in <sysfs>/kernel/debug/lustre, import in procfs, attributes in <sysfs>/fs/lustre)
    layout."""
    stats_base = proc / "fs" / "lustre" if layout == "procfs" else sys / "kernel" / "debug" / "lustre"
    llite = f"{fsname}-{superblock}"
    (stats_base / "llite" / llite).mkdir(parents=True, exist_ok=True)
    text = (LUSTRE_SAMPLE / "llite" / f"{SAMPLE_FSNAME}-{SAMPLE_SUPERBLOCK}" / "stats").read_text()
    (stats_base / "llite" / llite / "stats").write_text(text)
    for sample in sorted((LUSTRE_SAMPLE / "osc").iterdir()):
        osc = sample.name.replace(SAMPLE_SUPERBLOCK, superblock).replace(SAMPLE_FSNAME, fsname, 1)
        for name in ("stats", "import", "rpc_stats"):
            base = stats_base if name == "stats" else proc / "fs" / "lustre"
            (base / "osc" / osc).mkdir(parents=True, exist_ok=True)
            (base / "osc" / osc / name).write_text((sample / name).read_text())
        if layout != "procfs":
            (sys / "fs" / "lustre" / "osc" / osc).mkdir(parents=True, exist_ok=True)
            (sys / "fs" / "lustre" / "osc" / osc / "max_rpcs_in_flight").write_text("8\n")


def build_fs_tree(root: Path, lustre: Sequence[str] = ("lustrefs",), nfs: bool = True,
                  layout: str = "procfs") -> tuple[Path, Path]:
    """procfs and sysfs roots with one Lustre mount per name in `lustre` (at /lustre/<name>) and the
    sample NFS mount (/mnt/nfs/test) beside local ones; `<procfs>/self` links to a pid as on a host."""
    proc, sys = root / "proc", root / "sys"
    (proc / PID).mkdir(parents=True)
    sys.mkdir(parents=True, exist_ok=True)
    (proc / "self").symlink_to(PID)
    lines = [LOCAL_MOUNTS]
    for number, fsname in enumerate(lustre):
        superblock = f"ffff8810{number:08x}"
        copy_lustre_client(proc, sys, fsname, superblock, layout)
        lines.append(lustre_mount_line(f"/lustre/{fsname}", fsname, 300 + number))
    if nfs:
        lines.append(nfs_mount_line("/mnt/nfs/test"))
        shutil.copyfile(NFS_SAMPLE / "mountstats", proc / PID / "mountstats")
    (proc / PID / "mountinfo").write_text("".join(lines))
    return proc, sys


# An NFSv4.2 client's per-op list (the kernel's nfs4_procedures order): a real mount's block is ~5 KB.
NFS4_OPERATIONS = (
    "NULL", "READ", "WRITE", "COMMIT", "OPEN", "OPEN_CONFIRM", "OPEN_NOATTR", "OPEN_DOWNGRADE", "CLOSE", "SETATTR",
    "FSINFO", "RENEW", "SETCLIENTID", "SETCLIENTID_CONFIRM", "LOCK", "LOCKT", "LOCKU", "ACCESS", "GETATTR", "LOOKUP",
    "LOOKUP_ROOT", "REMOVE", "RENAME", "LINK", "SYMLINK", "CREATE", "PATHCONF", "STATFS", "READLINK", "READDIR",
    "SERVER_CAPS", "DELEGRETURN", "GETACL", "SETACL", "FS_LOCATIONS", "RELEASE_LOCKOWNER", "SECINFO", "FSID_PRESENT",
    "EXCHANGE_ID", "CREATE_SESSION", "DESTROY_SESSION", "SEQUENCE", "GET_LEASE_TIME", "RECLAIM_COMPLETE",
    "LAYOUTGET", "GETDEVICEINFO", "LAYOUTCOMMIT", "LAYOUTRETURN", "SECINFO_NO_NAME", "TEST_STATEID", "FREE_STATEID",
    "GETDEVICELIST", "BIND_CONN_TO_SESSION", "DESTROY_CLIENTID", "SEEK", "ALLOCATE", "DEALLOCATE", "LAYOUTSTATS",
    "CLONE", "COPY", "OFFLOAD_CANCEL", "LOOKUPP", "LAYOUTERROR", "COPY_NOTIFY", "GETXATTR", "SETXATTR", "LISTXATTRS",
    "REMOVEXATTR", "READ_PLUS",
)


def kernel_escape(field: str) -> str:
    """What the kernel's seq_escape does to a mount point or source: space, tab, newline, backslash as octal."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in field)


def nfs4_block(mount_point: str, read_bytes: int | str = 1_048_576) -> str:
    """A /proc/self/mountstats block of an NFSv4.2 mount, every operation counted (READ `read_bytes` bytes)."""
    point = kernel_escape(mount_point)
    ops = "".join(f"\t{name:>12}: 1234 1234 0 234567 345678 12 3456 4567 0\n" for name in NFS4_OPERATIONS)
    return (f"device 10.0.0.1:/export/home mounted on {point} with fstype nfs4 statvers=1.1\n"
            "\topts:\trw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,acregmax=60,acdirmin=30,"
            "acdirmax=60,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.5,local_lock=none\n"
            "\tage:\t13968\n\tcaps:\tcaps=0xfff7,wtmult=512,dtsize=32768,bsize=0,namlen=255\n"
            "\tsec:\tflavor=1,pseudoflavor=1\n"
            "\tevents:\t52 226 0 0 1 13 398 0 0 331 0 47 0 0 77 0 0 77 0 0 0 0 0 0 0 0 0\n"
            f"\tbytes:\t{read_bytes} 0 0 0 1048576 0 256 0\n"
            "\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)\n"
            "\txprt:\ttcp 832 0 1 0 11 6428 6428 0 12154 0 24 26 5726\n"
            f"\tper-op statistics\n{ops}\n")


def add_nfs_mounts(proc: Path, mount_points: Sequence[str], first_id: int = 1000) -> None:
    """NFSv4.2 mounts at `mount_points`, in mountinfo and mountstats after what is there."""
    with (proc / PID / "mountinfo").open("a", encoding="utf-8") as mountinfo, \
            (proc / PID / "mountstats").open("a", encoding="utf-8") as mountstats:
        for number, point in enumerate(mount_points, first_id):
            mountinfo.write(nfs_mount_line(kernel_escape(point), number))
            mountstats.write(nfs4_block(point))
