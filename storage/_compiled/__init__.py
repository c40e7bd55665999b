"""Compiled twins of storage's hot paths (Cython, built by ``pip install -e .``).

Each ``<name>.pyx`` here mirrors ``storage/<name>.py`` (``log_validator``: the request
checks and the offset patch; ``cleaner``: the offset map), which stays the reference and
picks its twin at import through :mod:`storage.extensions`.
"""
