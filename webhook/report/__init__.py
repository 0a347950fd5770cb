"""`layer-locality report`: the holdout's figures from /metrics or Prometheus, their
effect estimates and plots."""
