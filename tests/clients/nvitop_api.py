"""Probe run by tests/test_nvml_clients.py inside exporter.sim.client: reads a simulated
host through nvitop's Python API, unmodified, and writes what it saw as JSON (argv[1])."""

import json
import sys

from nvitop import NA, Device


def plain(value):
    return None if value is NA else value


def processes(device):
    out = {}
    for pid, proc in sorted(device.processes().items()):
        snap = proc.as_snapshot()  # every attribute nvitop shows (host side through psutil)
        out[str(pid)] = {
            "gpu_memory": plain(proc.gpu_memory()), "username": plain(snap.username),
            "command": plain(snap.command), "running_time": plain(proc.running_time_in_seconds()),
            "gpu_instance_id": plain(proc.gpu_instance_id()), "type": plain(proc.type),
            "host_memory": plain(snap.host_memory),
        }
    return out


def describe(device):
    snap = device.as_snapshot()  # calls every reading nvitop has
    return {
        "name": plain(device.name()), "uuid": plain(device.uuid()), "bus_id": plain(device.bus_id()),
        "memory_total": plain(device.memory_total()), "memory_used": plain(device.memory_used()),
        "power_usage": plain(device.power_usage()), "power_limit": plain(device.power_limit()),
        "temperature": plain(device.temperature()), "fan_speed": plain(device.fan_speed()),
        "performance_state": plain(device.performance_state()), "persistence_mode": plain(device.persistence_mode()),
        "display_active": plain(device.display_active()), "compute_mode": plain(device.compute_mode()),
        "mig_mode": plain(device.mig_mode()), "gpu_utilization": plain(device.gpu_utilization()),
        "nvlink_link_count": plain(device.nvlink_link_count()), "bar1_total": plain(snap.bar1_memory_total),
        "gpu_instance_id": plain(device.gpu_instance_id()) if device.is_mig_device() else None,
        "processes": processes(device),
    }


result = {"count": Device.count(), "driver": Device.driver_version(), "devices": []}
for device in Device.all():
    entry = describe(device)
    entry["mig_devices"] = [describe(mig) for mig in device.mig_devices()]
    result["devices"].append(entry)
with open(sys.argv[1], "w", encoding="utf-8") as fh:
    json.dump(result, fh, indent=1)
