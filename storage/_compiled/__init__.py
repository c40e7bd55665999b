"""Compiled twins of storage's hot paths (Cython, built by ``pip install -e .``).

Each ``<name>.pyx`` here mirrors ``storage/<name>.py``, which stays the reference and picks
its twin at import through :mod:`storage.extensions`.
"""
