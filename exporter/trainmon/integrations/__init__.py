"""Integrations with training frameworks that need more than a callback (each module imports its framework)."""
