"""Callbacks that drive a `TrainingMonitor` from a framework's training loop.

`trainmon.torch.adapters.lightning.TrainmonCallback` (PyTorch Lightning) and
`trainmon.torch.adapters.hf.TrainmonCallback` (Hugging Face `Trainer`). Each module imports its
framework, so import only the one you use.
"""
