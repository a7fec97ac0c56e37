"""trainmon: a per-node monitor for GPU training clusters.

Importing the package loads nothing heavy: the daemon's dependencies are the `daemon` extra.
"""

__version__ = "0.1.0"
# Where the project's documentation is published: the alerts' runbook_url, the systemd unit's
# Documentation= and `trainmon diagnose`'s links start with it (tests/prometheus/test_docs_base.py).
DOCS_BASE = "https://github.com/trainmon/trainmon/blob/main/docs"
