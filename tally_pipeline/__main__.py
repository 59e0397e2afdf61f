"""``python -m tally_pipeline`` is the ``tally`` command."""

from tally_pipeline.cli import main

main()
