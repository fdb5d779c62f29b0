"""Prometheus metrics of the operator and the checkpoint mirror (prometheus-client, units in names)."""
