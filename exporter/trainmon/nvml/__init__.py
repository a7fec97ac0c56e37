"""NVML access for the GPU collector: session and back-off, per-GPU reads, GPM, XID events.

The scenario library and the demo's simulated node live in `trainmon.simulation`, a layer below.
pynvml is imported here and only here, so enabling other collectors never loads it.
"""
