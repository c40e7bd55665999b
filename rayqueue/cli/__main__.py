"""``python -m rayqueue.cli``: the same as the ``rayqueue`` console script."""

from rayqueue.cli import main

main()
