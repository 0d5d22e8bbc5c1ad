"""GPU models and their MIG profiles, as data, plus pure MIG placement rules.

Facts come from ../shared/reference/nvml_facts.md (section 2); the raw tables live in
exporter/catalog_data.py. Used by the simulator (to behave like a given GPU) and by
`exporter recommend` (to enumerate layouts). On a real GPU the profiles NVML reports win
over this table.

A *placement* is ``(profile_name, start)`` with ``start`` in memory slices; a *layout* is a
list of placements on one GPU.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import combinations
from typing import Iterable, Sequence

from exporter import catalog_data, catalog_variants

MIB = 1024 * 1024


@dataclass(frozen=True)
class MigProfile:
    name: str  # "3g.40gb" (NVML name is "MIG " + name, returned as bytes in the profile struct)
    profile_id: int  # NVML profile id (.id), e.g. 9
    enum_index: int  # NVML_GPU_INSTANCE_PROFILE_* index passed to ...GetGpuInstanceProfileInfo
    slice_count: int  # compute (SM) slices: the "3" of 3g
    memory_slices: int  # placement size in memory slices
    memory_mib: int  # memorySizeMB
    sm_count: int  # multiprocessorCount
    max_instances: int  # instanceCount
    starts: tuple[int, ...]  # valid placement starts, in memory slices
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0
    media_extensions: bool = False  # "+me" profiles
    inferred: bool = False  # True when a value is [inf] in the reference facts
    # ((first driver branch, memorySizeMB), ...) where branches print different sizes; empty
    # when every observed branch agrees. ``memory_mib`` is the smallest unless the model was
    # built for one branch (GpuModel.for_driver).
    memory_by_branch: tuple[tuple[int, int], ...] = ()
    since_branch: int = 0  # first driver branch offering this profile (0: every branch)

    def memory_mib_on(self, branch: int | None) -> int:
        """memorySizeMB on driver branch ``branch``; None: the smallest any branch prints."""
        if not self.memory_by_branch:
            return self.memory_mib
        if branch is None:
            return min(mib for _, mib in self.memory_by_branch)
        chosen = self.memory_by_branch[0][1]
        for first, mib in self.memory_by_branch:
            if branch >= first:
                chosen = mib
        return chosen


@dataclass(frozen=True)
class Variant:
    """One board built on a model: SXM module, PCIe card or NVL card (catalog_variants.py)."""

    key: str  # "SXM5", "PCIe", "NVL" (case-insensitive in scenarios)
    nvml_name: str  # product name NVML returns for this board
    aliases: tuple[str, ...]
    pci_device_id: int
    pci_subsystem_id: int
    power_limit_watts: float  # default (and, unless a scenario sets one, enforced) limit
    min_power_limit_watts: float
    max_power_limit_watts: float
    idle_power_watts: float
    form_factor: str  # "SXM" | "PCIe"
    nvlink_links: int  # NVLink links the board has (0: none)
    nvlink_active: bool  # links up (SXM baseboards, NVL bridges) or present but inactive
    overrides: tuple[tuple[str, object], ...] = ()  # GpuModel fields this board changes
    profiles_inferred: bool = False  # MIG table taken from another board: every profile inferred
    profile_sms: tuple[tuple[str, int], ...] = ()  # observed multiprocessorCount per profile


@dataclass(frozen=True)
class GpuModel:
    key: str  # scenario alias, e.g. "H100-80GB"
    nvml_name: str  # product name NVML returns, e.g. "NVIDIA H100 80GB HBM3"
    aliases: tuple[str, ...]
    architecture: str  # "ampere" | "hopper" | "blackwell" | ...
    compute_capability: tuple[int, int]
    pci_device_id: int  # e.g. 0x233010DE
    memory_total_mib: int  # as nvidia-smi shows total
    memory_reserved_mib: int  # v2 "reserved"
    sm_count: int  # full GPU, non-MIG
    power_limit_watts: float
    idle_power_watts: float
    max_clocks_mhz: tuple[int, int, int, int]  # graphics, sm, memory, video
    memory_slices: int  # 8 on A100/H100/H200/B200, 4 on A30; 0 when not MIG-capable
    compute_slices: int  # 7 or 4; 0 when not MIG-capable
    max_mig_devices: int  # nvmlDeviceGetMaxMigDeviceCount with MIG on (7 or 4)
    mig_profiles: tuple[MigProfile, ...] = ()
    # --- board facts (catalog_variants.py); the variant fields describe ``variant`` ---------
    variant: str = ""  # key of the board these values describe, e.g. "SXM5" or "PCIe"
    variants: tuple[Variant, ...] = ()  # every board of this model, default first
    pci_subsystem_id: int = 0
    min_power_limit_watts: float = 0.0
    max_power_limit_watts: float = 0.0
    form_factor: str = ""
    nvlink_links: int = 0
    nvlink_active: bool = False
    nvlink_version: int = 0  # NVML_NVLINK_VERSION_* (0: no NVLink)
    bar1_mib: int = 0  # BAR1 aperture of the whole GPU
    pcie_generation: int = 0
    pcie_width: int = 0
    idle_pstate: int = 0  # NVML_PSTATE_* when no process runs (P0 while busy)
    temperature_limits_c: tuple[int, int, int, int] = (0, 0, 0, 0)  # shutdown, slowdown, gpu max, mem max
    memory_bus_width: int = 0  # bits
    brand: int = 0  # NVML_BRAND_*
    default_app_clock_mhz: int = 0
    fans: int = 0  # every catalog board is passively cooled (fan calls: NotSupported)
    # ((first driver branch, MiB), ...): the BAR1 aperture MIG devices share by memory slices
    mig_bar1_mib: tuple[tuple[int, int], ...] = ()
    # Driver branch the MIG sizes are for (580 for 580.95.05); None: the smallest size any
    # observed branch prints, what is sure to fit whatever the driver (recommend's default).
    driver_branch: int | None = None

    def for_driver(self, driver_version: str | int | None) -> GpuModel:
        """This model with the MIG profiles and memory sizes of driver ``driver_version``
        ("580.95.05" or a branch number); None gives every profile at its smallest size (sure
        to fit on every branch)."""
        branch = driver_branch(driver_version)
        if branch == self.driver_branch:
            return self
        source = self
        if self.driver_branch is not None:  # another branch dropped profiles: start from the catalog's
            base = _CATALOG[self.key]
            source = base if base.variant == self.variant else base.with_variant(self.variant)
        profiles = tuple(dataclasses.replace(p, memory_mib=p.memory_mib_on(branch))
                         if p.memory_by_branch else p for p in source.mig_profiles
                         if branch is None or p.since_branch <= branch)
        return dataclasses.replace(self, mig_profiles=profiles, driver_branch=branch)

    def mig_bar1_total_mib(self, profile: MigProfile) -> int:
        """BAR1 total of a MIG device of ``profile`` on this model's driver branch: its memory
        slices' share of the aperture, less 1 MiB (nvidia-smi's MIG devices table)."""
        aperture = self.bar1_mib
        for first, mib in self.mig_bar1_mib:
            if self.driver_branch is None or self.driver_branch >= first:
                aperture = mib
        return aperture * profile.memory_slices // self.memory_slices - 1

    @property
    def sizes_basis(self) -> str:
        """Which MIG sizes these are and from where, for a plan's basis line."""
        differing = [p.name for p in self.mig_profiles if p.memory_by_branch]
        branch = f"driver branch R{self.driver_branch}" if self.driver_branch is not None else None
        if not differing:
            return (f"{self.key} MIG sizes as nvidia-smi mig -lgip prints them on every observed "
                    f"driver branch (docs/hardware-facts.md)")
        which = branch or "the smallest any observed driver branch prints (sure to fit)"
        return (f"{self.key} MIG sizes for {which}; {', '.join(differing)} differ by branch "
                f"(docs/hardware-facts.md)")

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def gpm_supported(self) -> bool:
        """GPM exists on Hopper and newer only."""
        return self.architecture in ("hopper", "blackwell")

    @property
    def memory_capacity_bytes(self) -> int:
        """Bytes processes can allocate on the whole GPU (total minus reserved)."""
        return (self.memory_total_mib - self.memory_reserved_mib) * MIB

    @property
    def all_names(self) -> tuple[str, ...]:
        """Every name this model answers to: key, NVML product name, aliases."""
        return (self.key, self.nvml_name, *self.aliases)

    @property
    def cuda_cores(self) -> int:
        """nvmlDeviceGetNumGpuCores: FP32 cores, 64 per SM before Ada except on Ada/Hopper/Blackwell (128)."""
        return self.sm_count * (128 if self.architecture in ("ada", "hopper", "blackwell") else 64)

    def with_variant(self, key: str) -> GpuModel:
        """This model as board ``key`` (case-insensitive); KeyError naming the known ones."""
        for v in self.variants:
            if v.key.casefold() == key.strip().casefold():
                return _apply_variant(self, v)
        known = ", ".join(v.key for v in self.variants)
        raise KeyError(f"unknown variant {key!r} of {self.key} (known: {known})")

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        """The profile whose NVML ``.id`` is ``profile_id``, or None."""
        return next((p for p in self.mig_profiles if p.profile_id == profile_id), None)

    def profile_by_enum(self, enum_index: int) -> MigProfile | None:
        """The profile for NVML_GPU_INSTANCE_PROFILE_* index ``enum_index``, or None."""
        return next((p for p in self.mig_profiles if p.enum_index == enum_index), None)

    def profile(self, name: str) -> MigProfile:
        """The profile called ``name`` ("3g.40gb"); KeyError naming the valid ones otherwise."""
        for p in self.mig_profiles:
            if p.name == name:
                return p
        valid = ", ".join(p.name for p in self.mig_profiles) or "none (not MIG-capable)"
        branch = f" on driver branch R{self.driver_branch}" if self.driver_branch is not None else ""
        raise KeyError(f"unknown MIG profile {name!r} for {self.key}{branch} (valid: {valid})")


def driver_branch(driver_version: str | int | None) -> int | None:
    """580 for "580.95.05" or 580; None for None. ValueError for anything else."""
    if driver_version is None or isinstance(driver_version, int):
        return driver_version
    head = str(driver_version).strip().split(".")[0].upper().removeprefix("R")
    if not head.isdigit():
        raise ValueError(f"driver version {driver_version!r} is not like 580.95.05 or R580")
    return int(head)


def _apply_variant(model: GpuModel, v: Variant) -> GpuModel:
    """``model`` with the board-specific fields of variant ``v``."""
    fields = dict(
        variant=v.key, nvml_name=v.nvml_name, pci_device_id=v.pci_device_id,
        pci_subsystem_id=v.pci_subsystem_id, power_limit_watts=v.power_limit_watts,
        min_power_limit_watts=v.min_power_limit_watts, max_power_limit_watts=v.max_power_limit_watts,
        idle_power_watts=v.idle_power_watts, form_factor=v.form_factor, nvlink_links=v.nvlink_links,
        nvlink_active=v.nvlink_active, **dict(v.overrides))
    if v.profiles_inferred or v.profile_sms:
        sms = fields.get("sm_count", model.sm_count)
        observed = dict(v.profile_sms)
        fields["mig_profiles"] = tuple(
            dataclasses.replace(p, inferred=p.inferred or v.profiles_inferred,
                                sm_count=observed.get(p.name, min(p.sm_count, sms)))
            for p in model.mig_profiles)
    return dataclasses.replace(model, **fields)


def _build_models() -> dict[str, GpuModel]:
    models = {}
    for key, row in catalog_data.MODEL_ROWS.items():
        fields = dict(row)
        fields.update(catalog_variants.BOARD_ROWS[key])
        fields["variants"] = tuple(
            Variant(**{**v, "overrides": tuple(v.get("overrides", {}).items())})
            for v in catalog_variants.VARIANT_ROWS[key])
        by_branch = catalog_data.BRANCH_MEMORY_GIB.get(key, {})
        since = catalog_data.PROFILE_SINCE.get(key, {})
        profiles = tuple(
            MigProfile(
                name=p[0], profile_id=p[1], enum_index=p[2], slice_count=p[3],
                memory_slices=p[4], memory_mib=p[5], sm_count=p[6], max_instances=p[7],
                starts=p[8], copy_engines=p[9], decoders=p[10], encoders=p[11], jpegs=p[12],
                ofas=p[13], media_extensions=p[14], inferred=p[15],
                memory_by_branch=tuple((b, catalog_data.gib(g)) for b, g in by_branch.get(p[0], ())),
                since_branch=since.get(p[0], 0),
            )
            for p in fields.pop("profiles")
        )
        model = GpuModel(key=key, mig_profiles=profiles, **fields)
        models[key] = _apply_variant(model, model.variants[0])
    return models


# Each model as its default board (the first variant).
MODELS: dict[str, GpuModel] = _build_models()
_CATALOG: dict[str, GpuModel] = dict(MODELS)  # never rebound by sizes_for_driver


@contextmanager
def sizes_for_driver(driver_version: str | int | None):
    """Within the block, MODELS (and name look-ups) hold the MIG sizes of ``driver_version``;
    None keeps the smallest any branch prints. For `exporter recommend --driver`, whose
    planner modules read MODELS directly; restored on exit."""
    global _BY_NAME
    saved, saved_names = dict(MODELS), _BY_NAME
    try:
        MODELS.update({k: m.for_driver(driver_version) for k, m in saved.items()})
        _BY_NAME = _names()
        yield
    finally:
        MODELS.clear()
        MODELS.update(saved)
        _BY_NAME = saved_names


def _names() -> dict[str, GpuModel]:
    by_name = {}
    for model in MODELS.values():
        for name in (model.key, *model.aliases):
            by_name[name.casefold()] = model
        for v in model.variants:
            board = model if v.key == model.variant else model.with_variant(v.key)
            by_name.setdefault(v.nvml_name.casefold(), board)  # a name two boards share: the first
            for name in v.aliases:
                by_name[name.casefold()] = board
    return by_name


_BY_NAME: dict[str, GpuModel] = _names()


def board(name: str, variant: str | None = None, power_limit_watts: float | None = None,
          driver_version: str | int | None = None) -> GpuModel:
    """The model called ``name`` as board ``variant`` (default: the one the name implies) with
    its enforced power limit set to ``power_limit_watts`` (default: the board's default limit)
    and the MIG sizes of ``driver_version`` (default: the smallest any branch prints).
    KeyError (one-line message) for an unknown name or variant."""
    model = resolve_model(name).for_driver(driver_version)
    if variant is not None and variant.casefold() != model.variant.casefold():
        model = model.with_variant(variant)
    if power_limit_watts is not None:
        model = dataclasses.replace(model, power_limit_watts=float(power_limit_watts))
    return model


def resolve_model(name: str) -> GpuModel:
    """The model called ``name`` (key, NVML product name or alias; case-insensitive).

    A board's own name ("NVIDIA A100-PCIE-40GB", "NVIDIA H100 PCIe") gives the model as that
    board (``variant`` and the variant fields set); the key gives the default board.
    Raises KeyError whose first arg is a one-line message listing the known keys.
    """
    model = _BY_NAME.get(str(name).strip().casefold())
    if model is None:
        known = ", ".join(MODELS)
        raise KeyError(f"unknown GPU model {name!r} (known: {known}; NVML product names also work)")
    return model


# --- MIG placement rules ---------------------------------------------------------------

Placement = tuple[str, int]


def _span(profile: MigProfile, start: int) -> range:
    return range(start, start + profile.memory_slices)


def layout_fits(model: GpuModel, placements: Iterable[Placement]) -> str | None:
    """None if ``placements`` can exist together on ``model``, else why not (one line).

    Rules (nvml_facts.md §2.1): the profile exists; the start is one of its allowed starts;
    at most ``max_instances`` of each profile; memory slices [start, start+size) do not
    overlap; compute slices sum to at most ``model.compute_slices``; and the optical-flow /
    media engines (OFA) of the +me profiles sum to at most the full-GPU profile's count,
    which is why only one +me instance can exist per GPU.
    """
    placements = list(placements)
    if placements and not model.mig_capable:
        return f"{model.key} is not MIG-capable"
    owner: dict[int, Placement] = {}
    counts: Counter[str] = Counter()
    compute = ofas = 0
    for name, start in placements:
        try:
            profile = model.profile(name)
        except KeyError as exc:
            return exc.args[0]
        if start not in profile.starts:
            allowed = ", ".join(map(str, profile.starts))
            return f"{name} cannot start at memory slice {start} (allowed starts: {allowed})"
        counts[name] += 1
        if counts[name] > profile.max_instances:
            return f"more than {profile.max_instances} x {name} (its maximum on {model.key})"
        for s in _span(profile, start):
            if s in owner:
                other, other_start = owner[s]
                return f"{name} at {start} overlaps {other} at {other_start} (memory slice {s})"
            owner[s] = (name, start)
        compute += profile.slice_count
        ofas += profile.ofas
    if compute > model.compute_slices:
        return f"layout needs {compute} compute slices, {model.key} has {model.compute_slices}"
    ofa_budget = max((p.ofas for p in model.mig_profiles), default=0)
    if ofas > ofa_budget:
        return f"layout needs {ofas} media (OFA) engines, {model.key} has {ofa_budget}"
    return None


def first_free_start(
    model: GpuModel, taken: Sequence[Placement], profile_name: str
) -> int | None:
    """Lowest allowed start where one more ``profile_name`` fits next to ``taken``; None if none."""
    profile = model.profile(profile_name)
    for start in profile.starts:
        if layout_fits(model, [*taken, (profile_name, start)]) is None:
            return start
    return None


def remaining_capacity(model: GpuModel, taken: Sequence[Placement], profile_name: str) -> int:
    """How many more ``profile_name`` instances can be created *together* next to ``taken``.

    This is the meaning of nvmlDeviceGetGpuInstanceRemainingCapacity. Counting the starts
    where one instance fits on its own over-counts (an empty H100 has 7 free starts for
    1g.10gb+me but room for one), and greedy filling is only exact while starts are aligned
    to the profile size, so this tries every subset of the free starts (at most 2^7) and
    keeps the largest that fits as a whole.
    """
    profile = model.profile(profile_name)
    if layout_fits(model, taken) is not None:
        return 0
    starts = [s for s in profile.starts if layout_fits(model, [*taken, (profile_name, s)]) is None]
    for k in range(len(starts), 0, -1):
        for chosen in combinations(starts, k):
            if layout_fits(model, [*taken, *((profile_name, s) for s in chosen)]) is None:
                return k
    return 0


def all_placements(model: GpuModel) -> list[Placement]:
    """Every (profile, start) pair the model allows, by start then profile order."""
    order = {p.name: i for i, p in enumerate(model.mig_profiles)}
    return sorted(
        ((p.name, s) for p in model.mig_profiles for s in p.starts),
        key=lambda ps: (ps[1], order[ps[0]]),
    )


def enumerate_layouts(model: GpuModel, maximal_only: bool = False) -> list[tuple[Placement, ...]]:
    """Every valid non-empty layout of ``model``, each a tuple in ``all_placements`` order.

    With ``maximal_only`` only layouts to which no further placement can be added. Every
    rule in ``layout_fits`` only gets stricter as placements are added, so a depth-first
    search that stops at the first violation visits exactly the valid sets.
    """
    candidates = all_placements(model)
    found: list[tuple[Placement, ...]] = []

    def extend(chosen: list[Placement], next_index: int) -> bool:
        """Record valid extensions of ``chosen``; True if any candidate from next_index fits."""
        grew = False
        for i in range(next_index, len(candidates)):
            trial = [*chosen, candidates[i]]
            if layout_fits(model, trial) is not None:
                continue
            grew = True
            if not maximal_only:
                found.append(tuple(trial))
            has_child = extend(trial, i + 1)
            # Maximal: nothing after i fits (no child) and nothing before i fits either.
            if maximal_only and not has_child and all(
                layout_fits(model, [*trial, candidates[j]]) is not None
                for j in range(i) if candidates[j] not in trial
            ):
                found.append(tuple(trial))
        return grew

    extend([], 0)
    return found
