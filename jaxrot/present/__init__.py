"""Presentation: plots, animations, generated docs and the command line (never imported by jaxrot itself)."""
