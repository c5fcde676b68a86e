"""The ``grouper`` command line: argument parsing and one module per subcommand group.

The top of the house: it may import every room. The entry point is
:func:`grouper.cli.main.main` (``python -m grouper.cli`` runs it too).
"""
