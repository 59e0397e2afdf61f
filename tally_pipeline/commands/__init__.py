"""``tally`` subcommands, one module per area, each command defined at module level; ``cli.py``
lists them all."""
