"""Stand-ins for hardware, below the collectors: the demo and the tests drive the real code with them.

`scenario` answers pynvml from a scenario (a Python libnvidia-ml), `node` is the demo's 8-GPU node
built on it, `incidents` is the catalogue of planted scenarios the node and the demo's job share.
Nothing here imports a collector, the daemon or `trainmon.demo`.
"""
