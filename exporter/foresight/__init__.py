"""OOM foresight: workload identity, learned memory profiles, their store, and forecasts.

Entry point for the poller: :class:`exporter.foresight.state.Foresight`.
"""

__all__ = ["Foresight", "ForesightResult"]


def __getattr__(name: str):
    # Lazy (PEP 562): importing exporter.foresight.workload (config, identity) does not load the
    # state, its store and SQLite; `from exporter.foresight import Foresight` still works.
    if name in __all__:
        from exporter.foresight import state

        return getattr(state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
