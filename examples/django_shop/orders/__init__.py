"""The orders app: an order and its confirmation job commit together, a worker confirms it."""
