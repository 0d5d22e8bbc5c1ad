"""Grafana dashboards for gpushare-exporter, built as code.

One module per dashboard (fleet, gpu, mig, mps, advice), each defining ``DASHBOARD``;
``dashboards.generate`` writes them to ``dashboards/json/``. See docs/dashboards.md.
"""
