"""Errors that reach the user as one line (never a traceback)."""


class UserError(Exception):
    """Bad input from a person: config, scenario, CLI argument, workload file.

    The message is one line that names the place (file and path inside it, or flag)
    and the problem, e.g. ``scenario.yaml: gpus[0].mig[1].profile: unknown MIG profile '5g.50gb'``.
    Commands print it as ``exporter: error: <message>`` and exit 2.
    """


class NoGpuError(UserError):
    """No NVIDIA driver / GPU on this host and no --simulate given."""
