"""CLI verbs, one module each (see phaseinterp/cli.py)."""
