"""The ``advisor`` command line: ``main`` parses and dispatches (advisor/cli/main.py),
one module per command does the work. Nothing imports this package; it imports
everything it needs, and the explorer (``advisor.tui``) only when a command shows it."""
