"""NVIDIA's Xid catalog as recorded series: `trainmon_xid_catalog_info{xid,mnemonic,action}`, once for the fleet.

The table is the same on every node. Served by each daemon it was 172 series per node, 172,000 identical
ones at 1,000 nodes; recorded here it is 172 in all, and `on (xid) group_left (mnemonic, action)` joins read
it as before. The daemon serves the table as JSON at `/api/v1/xid-catalog`.
"""

from __future__ import annotations

from trainmon.catalog.recorded import XID_CATALOG_INFO
from trainmon.health.catalog import action_of
from trainmon.health.xid_catalog import CATALOG

from .model import Group, Record

SERIES = XID_CATALOG_INFO.name
GROUP = "trainmon.xid_catalog.rules"


def xid_catalog_group() -> Group:
    """One constant series per code; evaluated every minute so it never goes stale between evaluations."""
    return Group(
        name=GROUP,
        interval="1m",
        rules=[Record(record=SERIES, expr="vector(1)",
                      labels=(("xid", str(xid)), ("mnemonic", entry.mnemonic), ("action", action_of(entry).label)))
               for xid, entry in CATALOG.items()],
    )
