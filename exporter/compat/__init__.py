"""Outputs shaped like other exporters', so that their dashboards and rules keep working.

``dcgm_exporter``: NVIDIA dcgm-exporter's /metrics (docs/dcgm-exporter.md), served on a second
listener (``--compat-listen``) beside this exporter's own /metrics.
"""
