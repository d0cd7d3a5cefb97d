"""One module per chapter: the probes of its exercises (see coursekit/probe.py)."""
