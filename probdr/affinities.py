"""``import probdr.affinities``: the name of :mod:`probdr.input.affinities` at the top level (the
same module object)."""

import sys

from .input import affinities as _affinities

sys.modules[__name__] = _affinities
