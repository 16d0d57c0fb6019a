"""``python -m probdr.cli``: the ``probdr`` command (the ranks of ``--nproc`` start so)."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
