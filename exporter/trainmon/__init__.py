"""trainmon: a per-node monitor for GPU training clusters.

Importing the package loads nothing heavy: the daemon's dependencies are the `daemon` extra.
"""

__version__ = "0.1.0"
