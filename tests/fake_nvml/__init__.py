"""A fake libnvidia-ml.so.1 (C, built at test time) and the scenarios that drive it."""
