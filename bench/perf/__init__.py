"""Exporter performance bench (issue 6): helpers of ``bench/exporter_bench.py``.

Modules: scenarios (scaled scenario files), anatomy (one exporter's poll measured in this
process), minimum (the minimum NVML calls of an exported metric set), procstat (/proc
readings of a child process), load (scrape load generator), children (start/stop the
exporter and peer launchers), table (printing).
"""
