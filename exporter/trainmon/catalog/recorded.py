"""Families that Prometheus records from the rules rather than a daemon serves."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

XID_CATALOG_INFO = Family(
    "trainmon_xid_catalog_info",
    Kind.INFO,
    "NVIDIA's Xid catalog, one constant series per code, recorded once for the fleet (the daemon serves the "
    "same table as JSON at /api/v1/xid-catalog).",
    ("xid", "mnemonic", "action"),
)

FAMILIES: tuple[Family, ...] = (
    XID_CATALOG_INFO,
)
