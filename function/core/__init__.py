"""What every composer shares: inputs, outcome, events, errors, memo, Struct access."""
