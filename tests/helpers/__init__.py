"""Shared test support: real processes, free ports, required tools."""
