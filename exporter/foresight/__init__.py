"""OOM foresight: workload identity, learned memory profiles, their store, and forecasts.

Entry point for the poller: :class:`exporter.foresight.state.Foresight`.
"""

from exporter.foresight.state import Foresight, ForesightResult

__all__ = ["Foresight", "ForesightResult"]
