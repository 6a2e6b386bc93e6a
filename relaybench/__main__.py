"""``python -m relaybench ...`` runs the command line (see :mod:`relaybench.cli`)."""

from relaybench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
