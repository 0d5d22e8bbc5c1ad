"""Prototypes of the proposed exporter fixes, applied by monkeypatching, to measure their gain.

Nothing here changes exporter/; the bench applies a prototype only when asked
(``--prototype NAME``, or the launcher's ``--prototype``) and labels the figures so. Each
is described in docs/performance.md ("Findings"), with where the real fix belongs.

- ``inline-reads``: the GPUs are read in the poll thread itself, not handed to a reader
  thread (measures what the hand-off costs; drops the hung-GPU timeout, so not a fix).
"""

from __future__ import annotations

PROTOTYPES = ("inline-reads",)


def apply(names) -> None:
    """Monkeypatch the named prototypes into the exporter (this process)."""
    unknown = set(names) - set(PROTOTYPES)
    if unknown:
        raise ValueError(f"unknown prototype {min(unknown)!r} (known: {', '.join(PROTOTYPES)})")
    if "inline-reads" in names:
        from exporter.backend import nvml_worker

        def read_inline(pool, workers):  # the batch read where a reader thread would read it
            batch = nvml_worker._Batch(workers)
            worker = batch.take()
            while worker is not None:
                worker.run()
                worker = batch.take()
            return batch

        nvml_worker.ReadPool.start = read_inline
