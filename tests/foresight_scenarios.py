"""Synthetic Snapshots for the foresight tests, modelled on the Wan 2.2 MPS story (seed 000).

Three ti2v-5B jobs hold ~22 GiB each for most of their run and rise to ~33 GiB in their last
30 s. On an 80 GB H100 under MPS, started together they need 99 GiB at once and one is
OOM-killed; started 60 s apart they need at most 33 + 22 + 22 = 77 GiB and all finish.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.snapshot import GpuInfo, MigInstance, ProcessInfo, SimulationInfo, Snapshot

GiB = 2**30
MiB = 2**20
H100_TOTAL = 81559 * MiB  # what nvidia-smi shows for an H100 80GB HBM3
H100_RESERVED = 512 * MiB
UUID = "GPU-7f3a9c2e-0000-4000-8000-000000000001"
WAN_CMD = (
    "/opt/venv/bin/python3 generate.py --task ti2v-5B --size 1280*704 --ckpt_dir ./Wan2.2-TI2V-5B "
    "--offload_model True --prompt '{prompt}' --base_seed {seed} --save_file /outputs/{seed}.mp4"
)
WAN_DURATION = 510.0  # seconds: ~8.5 min per video, as in the talk's staggered run
WAN_PEAK_LENGTH = 30.0


def wan_memory(age: float) -> int:
    """Bytes a Wan ti2v-5B job holds at ``age`` seconds: 20 s load, 22 GiB, 33 GiB at the end."""
    if age < 20.0:
        return int(22 * GiB * age / 20.0)
    if age < WAN_DURATION - WAN_PEAK_LENGTH:
        return 22 * GiB
    return 33 * GiB


@dataclass
class Job:
    """One process in a synthetic run: starts at ``start`` (Unix s), memory from ``memory(age)``."""

    pid: int
    start: float
    duration: float = WAN_DURATION
    memory: object = wan_memory
    cmdline: str = ""
    gi: int | None = None
    known_start: bool = True  # whether the backend reports the process start time

    def alive(self, t: float) -> bool:
        """True while the job runs at time t."""
        return self.start <= t < self.start + self.duration

    def info(self, t: float) -> ProcessInfo:
        """Its ProcessInfo at time t."""
        cmd = self.cmdline or WAN_CMD.format(prompt=f"a cat number {self.pid}", seed=self.pid * 7)
        return ProcessInfo(
            pid=self.pid, name="python3", cmdline=cmd, gpu_index=0, gi=self.gi, ci=None if self.gi is None else 0,
            used_memory_bytes=self.memory(t - self.start), is_mps_client=True,
            start_time=self.start if self.known_start else None,
        )


def mps_gpu_snapshot(t: float, jobs: list[Job], oom_kills: int = 0, up: bool = True) -> Snapshot:
    """A one-GPU MPS host at time t with the jobs alive then (plus the MPS server process)."""
    procs = [j.info(t) for j in jobs if j.alive(t)]
    server = ProcessInfo(pid=900, name="nvidia-cuda-mps-server", cmdline="nvidia-cuda-mps-server", gpu_index=0,
                         gi=None, ci=None, used_memory_bytes=30 * MiB, is_mps_server=True)
    used = sum(p.used_memory_bytes for p in procs) + server.used_memory_bytes
    gpu = GpuInfo(
        index=0, uuid=UUID, name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:18:00.0", up=up,
        mig_mode=False, compute_mode="exclusive_process", sharing="mps",
        memory_total_bytes=H100_TOTAL, memory_reserved_bytes=H100_RESERVED, memory_used_bytes=used,
        memory_free_bytes=H100_TOTAL - H100_RESERVED - used, processes=tuple(procs + [server]) if up else (),
    )
    simulation = SimulationInfo(time_seconds=t, oom_kills={(0, ""): oom_kills})
    return Snapshot(timestamp=t, backend="nvml", driver_version="580.95.05", poll_duration_seconds=0.01,
                    gpus=(gpu,), simulation=simulation)


def mig_snapshot(t: float, jobs: list[Job], instances: list[tuple[int, str, int]]) -> Snapshot:
    """A MIG GPU at time t; ``instances`` are (gi, profile, total bytes); jobs carry their gi."""
    procs = [j.info(t) for j in jobs if j.alive(t)]
    migs = []
    for i, (gi, profile, total) in enumerate(instances):
        used = sum(p.used_memory_bytes for p in procs if p.gi == gi)
        migs.append(MigInstance(gi=gi, ci=0, mig_index=i, mig_uuid=f"MIG-{gi:08d}-0000-4000-8000-000000000000",
                                profile=profile, profile_id=9, placement_start=4 * i, placement_size=4, sm_count=60,
                                memory_total_bytes=total, memory_used_bytes=used, memory_free_bytes=total - used))
    gpu = GpuInfo(index=0, uuid=UUID, name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:18:00.0", up=True,
                  mig_mode=True, sharing="mig+mps", memory_total_bytes=H100_TOTAL,
                  mig_instances=tuple(migs), processes=tuple(procs))
    return Snapshot(timestamp=t, backend="nvml", driver_version="580.95.05", poll_duration_seconds=0.01, gpus=(gpu,))


def replay(foresight, jobs: list[Job], start: float, end: float, step: float = 5.0, build=mps_gpu_snapshot):
    """Feed one snapshot every ``step`` seconds from start to end; yields (t, result) after each."""
    t = start
    while t <= end:
        foresight.observe(build(t, jobs), now=t)
        yield t, foresight.result()
        t += step


def learn_solo_run(foresight, t0: float = 1_000_000.0, pid: int = 101) -> float:
    """Watch one Wan job run alone from start to exit; returns the time after it ended."""
    job = Job(pid=pid, start=t0 + 10.0)
    for _ in replay(foresight, [job], t0, t0 + 10.0 + WAN_DURATION + 10.0):
        pass
    return t0 + WAN_DURATION + 30.0
