"""Shells that feed the pure processors: the embedded runner and the Faust app."""
