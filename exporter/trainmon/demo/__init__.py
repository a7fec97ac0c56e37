"""`trainmon demo`: a simulated 8-GPU node, its NVMe and InfiniBand tree, and an 8-rank training job.

`runner` assembles them around the real daemon; `job` feeds the real ingest path, `tree` writes the
procfs/sysfs files the real collectors read; the incident catalogue and the simulated GPUs are
`trainmon.simulation`'s.
"""
