"""Typed records read from a sysfs root, in the manner of prometheus/procfs' `sysfs` package.

Each reader takes a `Root`, reads through `trainmon.roots` and returns frozen records; one
unavailable attribute leaves that one value `None` and is listed in the record's `skipped`.
Turning records into metric families is the collectors' business.
"""
