"""Every command defined in commands/ is reachable from ``tally``: cli.py lists them in one place."""

import importlib
import pkgutil

import click

from tally_pipeline import commands
from tally_pipeline.cli import main


def _reachable(group: click.Group) -> set[int]:
    seen = {id(group)}
    for command in group.commands.values():
        seen |= _reachable(command) if isinstance(command, click.Group) else {id(command)}
    return seen


def test_every_command_defined_in_commands_is_listed_in_the_cli() -> None:
    defined = {}
    for info in pkgutil.iter_modules(commands.__path__):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        defined |= {f"{info.name}.{name}": obj for name, obj in vars(module).items()
                    if isinstance(obj, click.Command) and getattr(obj, "callback", None) is not None
                    and obj.callback.__module__ == module.__name__}
    reachable = _reachable(main)
    assert defined, "no commands found: the listing test would pass on nothing"
    assert sorted(name for name, command in defined.items() if id(command) not in reachable) == []
