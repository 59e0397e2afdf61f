"""The ``realstack`` tier: the product met by real OpenStack services installed from PyPI."""
