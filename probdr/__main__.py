"""``python -m probdr``: the ``probdr`` command (:func:`probdr.cli.main`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
