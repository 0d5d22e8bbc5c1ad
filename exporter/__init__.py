"""gpushare-exporter: Prometheus metrics for GPUs shared by MIG, MPS and time-slicing."""

__version__ = "0.1.0"
