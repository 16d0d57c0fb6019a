"""The generative models of probdr, one readable file each (importable as ``probdr.models``)."""
