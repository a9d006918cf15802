"""PyTorch's own attention tests, re-run against this package."""
