"""Prototypes of the proposed exporter fixes, applied by monkeypatching, to measure their gain.

Nothing here changes exporter/; the bench applies a prototype only when asked
(``--prototype NAME``, or the launcher's ``--prototype``) and labels the figures so. Each
is described in docs/performance.md ("Findings"), with where the real fix belongs.

- ``one-reader``: NvmlBackend reads one GPU at a time (max_workers=1) instead of one
  thread per GPU at once: fewer threads competing with the event loop for the GIL.
- ``inline-reads``: the GPUs are read one after the other in the poll thread, no thread per
  GPU (measures what the threads cost; drops the hung-GPU timeout, so not a fix as is).
- ``sim-index``: the *simulator's* Engine.alive() looks only at the processes of the asked
  GPU/device (indexed once) instead of scanning and sorting every process of the scenario
  (GPM answers evaluate it 32 times per call): the fake driver gets cheaper, closer to the
  near-zero Python cost a real driver has. Not an exporter fix; it makes the bench fairer.
"""

from __future__ import annotations

PROTOTYPES = ("one-reader", "inline-reads", "sim-index")


def apply(names) -> None:
    """Monkeypatch the named prototypes into the exporter (this process)."""
    unknown = set(names) - set(PROTOTYPES)
    if unknown:
        raise ValueError(f"unknown prototype {min(unknown)!r} (known: {', '.join(PROTOTYPES)})")
    if "sim-index" in names:
        _index_simulator()
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


def _index_simulator() -> None:
    """Engine.alive() over a per-device / per-GPU index of the (static) process list."""
    from exporter.sim.engine import Engine

    def alive(self, t=None, gpu=None, device=None):
        t = self.now if t is None else t
        index = self.__dict__.get("_bench_index")
        if index is None or index[0] != len(self.procs):
            by_device, by_gpu = {}, {}
            for p in sorted(self.procs, key=lambda p: p.pid):
                by_device.setdefault(p.device, []).append(p)
                by_gpu.setdefault(p.gpu, []).append(p)
            index = self._bench_index = (len(self.procs), by_device, by_gpu, sorted(self.procs, key=lambda p: p.pid))
        if device is not None:
            pool = index[1].get(device, ())
            return [p for p in pool if p.alive(t) and (gpu is None or p.gpu == gpu)]
        pool = index[2].get(gpu, ()) if gpu is not None else index[3]
        return [p for p in pool if p.alive(t)]

    Engine.alive = alive
