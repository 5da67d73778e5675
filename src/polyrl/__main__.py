"""``python -m polyrl`` = the ``polyrl`` command."""

from polyrl.cli import main

main()
