"""``tally`` subcommands, one module per area. Each module defines ``register(main: click.Group)``.

Modules are discovered, so an area adds its commands without touching the others.
"""

from __future__ import annotations

import importlib
import pkgutil

import click


def register(main: click.Group) -> None:
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        loaded = importlib.import_module(f"{__name__}.{module.name}")
        hook = getattr(loaded, "register", None)
        if hook is not None:
            hook(main)
