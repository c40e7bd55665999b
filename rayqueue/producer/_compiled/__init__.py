"""Compiled twins of the producer's per-record path (Cython, built by ``pip install -e .``).

Each ``<name>.pyx`` here mirrors ``rayqueue/producer/<name>.py``, which stays the reference
and picks its twin at import through :mod:`storage.extensions`.
"""
