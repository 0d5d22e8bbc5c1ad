"""Prototypes of the proposed exporter fixes, applied by monkeypatching, to measure their gain.

Nothing here changes exporter/; the bench applies a prototype only when asked
(``--prototype NAME``, or the launcher's ``--prototype``) and labels the figures so. Each
is described in docs/performance.md ("Findings"), with where the real fix belongs.

- ``one-reader``: NvmlBackend reads one GPU at a time (max_workers=1) instead of one
  thread per GPU at once: fewer threads competing with the event loop for the GIL.
- ``inline-reads``: the GPUs are read one after the other in the poll thread, no thread per
  GPU (measures what the threads cost; drops the hung-GPU timeout, so not a fix as is).
"""

from __future__ import annotations

PROTOTYPES = ("one-reader", "inline-reads")


def apply(names) -> None:
    """Monkeypatch the named prototypes into the exporter (this process)."""
    unknown = set(names) - set(PROTOTYPES)
    if unknown:
        raise ValueError(f"unknown prototype {min(unknown)!r} (known: {', '.join(PROTOTYPES)})")
    if "inline-reads" in names:
        from exporter.backend import nvml

        def read_inline(worker):
            worker.result = worker.reader.read()

        nvml._GpuWorker.start_read = read_inline
    if "one-reader" in names:
        from exporter.backend import nvml

        init = nvml.NvmlBackend.__init__

        def init_one_reader(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.max_workers = 1

        nvml.NvmlBackend.__init__ = init_one_reader
