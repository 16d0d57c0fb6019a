"""The package's version, in a module of its own so that the command line reads it (``probdr
--version``) without importing the package's modelling layers."""

__version__ = "0.1.0"
