"""The hook's standard-library core: what any process uses to report one rank to the daemon.

- `state`: the rank's cumulative values (`RankState`, `Identity`), written by training, read by the sender;
- `sender`: the background `Reporter` and its transports (the daemon's Unix socket, or UDP);
- `numerics`: loss and grad-norm spike counting;
- `hang`: the reporter thread's hang watch and stack capture;
- `identity`: job id, launch layout, pod and NCCL environment, from the process's environment.

No PyTorch here: `trainmon.torch` builds `TrainingMonitor` on it, and the demo's simulated ranks and
other integrations use it directly.
"""
