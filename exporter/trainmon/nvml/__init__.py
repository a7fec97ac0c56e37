"""NVML access for the GPU collector: session and back-off, per-GPU reads, GPM, XID events.

`pylib` answers pynvml from a scenario (tests, and `simulated`, the demo's 8-GPU node).
pynvml is imported here and only here, so enabling other collectors never loads it.
"""
