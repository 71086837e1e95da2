"""One module per kind: its spec model and its status contract."""
