"""``python -m jaxrot``: the command-line interface, the same as the ``jaxrot`` command
(:func:`jaxrot.present.cli.main`); ``python -m jaxrot --version`` prints the version."""

import sys

from jaxrot.present.cli import main

if __name__ == "__main__":
    sys.exit(main())
