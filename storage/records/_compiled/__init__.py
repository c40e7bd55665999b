"""Compiled twins of the record codec (Cython, built by ``pip install -e .``).

Each ``<name>.pyx`` here mirrors ``storage/records/<name>.py``, which stays the reference and
picks its twin at import through :mod:`storage.extensions`.
"""
