"""The search layer: policies propose candidates, strategies decide what to evaluate next."""
