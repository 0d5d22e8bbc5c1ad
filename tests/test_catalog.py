"""Tests for exporter.catalog: facts from nvml_facts.md §2 and the MIG placement rules."""

from itertools import combinations

import pytest

from exporter.catalog import (
    MIB,
    MODELS,
    all_placements,
    enumerate_layouts,
    first_free_start,
    layout_fits,
    remaining_capacity,
    resolve_model,
)

H100 = MODELS["H100-80GB"]
A30 = MODELS["A30"]
A100_40 = MODELS["A100-40GB"]
MIG_MODELS = [m for m in MODELS.values() if m.mig_capable]


# --- facts spot checks (values copied from nvml_facts.md §2.3, not from the code) -------


def test_h100_3g40gb_matches_observed_lgip():
    """H100 3g.40gb is profile id 9 with 60 SMs, 39.50 GiB = 40448 MiB, starts {0,4}."""
    p = H100.profile("3g.40gb")
    assert (p.profile_id, p.sm_count, p.memory_mib, p.starts) == (9, 60, 40448, (0, 4))
    assert (p.slice_count, p.memory_slices, p.enum_index) == (3, 4, 2)


def test_a30_has_four_slices():
    """A30 has 4 memory slices, 4 compute slices and at most 4 MIG devices."""
    assert (A30.memory_slices, A30.compute_slices, A30.max_mig_devices) == (4, 4, 4)


def test_a100_40gb_1g5gb_has_14_sms():
    """A100-40GB 1g.5gb has 14 SMs and 4.75 GiB = 4864 MiB (matches go-nvml's A100 mock)."""
    p = A100_40.profile("1g.5gb")
    assert (p.sm_count, p.memory_mib, p.profile_id) == (14, 4864, 19)


def test_h100_total_memory_is_observed_value():
    """The H100 80GB HBM3 total is the observed 81559 MiB."""
    assert H100.memory_total_mib == 81559
    assert H100.memory_capacity_bytes == (81559 - H100.memory_reserved_mib) * MIB


def test_me_and_double_memory_profiles_use_their_enum_indices():
    """+me profiles are enum 7 (id 20) and 1g with 2x memory is enum 9 (id 15) on H100."""
    me = H100.profile_by_enum(7)
    double = H100.profile_by_enum(9)
    assert (me.name, me.profile_id, me.max_instances, me.media_extensions) == ("1g.10gb+me", 20, 1, True)
    assert (double.name, double.profile_id, double.memory_slices, double.starts) == (
        "1g.20gb", 15, 2, (0, 2, 4, 6))


def test_b200_large_profiles_are_marked_inferred():
    """B200 3g/4g/7g ids are only assumed (9/5/0) and flagged inferred; H100 values are observed."""
    assert [MODELS["B200"].profile(n).profile_id for n in ("3g.90gb", "4g.90gb", "7g.180gb")] == [9, 5, 0]
    assert all(p.inferred for p in MODELS["B200"].mig_profiles)
    assert not any(p.inferred for p in H100.mig_profiles)


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.key)
def test_profile_tables_are_self_consistent(model):
    """Ids and enums are unique, instances fit in memory, and no 1g ever starts at slice 7."""
    assert len({p.profile_id for p in model.mig_profiles}) == len(model.mig_profiles)
    assert len({p.enum_index for p in model.mig_profiles}) == len(model.mig_profiles)
    for p in model.mig_profiles:
        assert all(s + p.memory_slices <= model.memory_slices for s in p.starts)
        # Against the total, not total - reserved: the reserved figure is the non-MIG driver's,
        # and a real H200 (143771 MiB total, 700 MiB reserved on 550.90.12) still prints a
        # 139.75 GiB (143104 MiB) 7g.141gb.
        assert p.memory_mib <= model.memory_total_mib
    assert max(p.sm_count for p in model.mig_profiles) <= model.sm_count


def test_non_mig_models_have_no_profiles_and_no_gpm_before_hopper():
    """T4 and V100 are not MIG-capable and have no GPM; H100 has GPM."""
    for key in ("T4", "V100", "L4", "L40S"):
        assert not MODELS[key].mig_capable and MODELS[key].max_mig_devices == 0
    assert not MODELS["T4"].gpm_supported and not MODELS["V100"].gpm_supported
    assert H100.gpm_supported


# --- resolve_model ----------------------------------------------------------------------


@pytest.mark.parametrize("name,key", [
    ("H100-80GB", "H100-80GB"), ("nvidia h100 80gb hbm3", "H100-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("Tesla T4", "T4"), ("Tesla V100-SXM2-16GB", "V100"), (" NVIDIA B200 ", "B200"),
])
def test_resolve_model_accepts_keys_and_nvml_names(name, key):
    """Scenario keys and NVML product names resolve case-insensitively."""
    assert resolve_model(name).key == key


def test_resolve_model_unknown_lists_known_names():
    """An unknown name raises KeyError naming it and the known keys."""
    with pytest.raises(KeyError) as info:
        resolve_model("H900")
    assert "H900" in info.value.args[0] and "H100-80GB" in info.value.args[0]


# --- layout_fits ------------------------------------------------------------------------


def test_4g_plus_3g_is_valid():
    """4g.40gb at 0 and 3g.40gb at 4 coexist (R510+ rule in §2.1)."""
    assert layout_fits(H100, [("4g.40gb", 0), ("3g.40gb", 4)]) is None


def test_1g_at_start_7_is_invalid():
    """A 1g instance can never start at memory slice 7."""
    reason = layout_fits(H100, [("1g.10gb", 7)])
    assert reason is not None and "start" in reason and "7" in reason


def test_eight_1g_instances_are_invalid():
    """Eight 1g instances exceed the 7-instance maximum (and slice 7 is unusable anyway)."""
    reason = layout_fits(H100, [("1g.10gb", s) for s in range(7)] + [("1g.10gb", 0)])
    assert reason is not None and "7" in reason


@pytest.mark.parametrize("placements,word", [
    ([("5g.50gb", 0)], "unknown"),
    ([("3g.40gb", 0), ("2g.20gb", 2)], "overlap"),
    ([("2g.20gb", 6)], "start"),
    ([("1g.10gb+me", 0), ("1g.10gb+me", 1)], "maximum"),
    ([("4g.40gb", 0), ("1g.20gb", 4), ("1g.20gb", 6), ("1g.10gb", 5)], "overlap"),
    ([("7g.80gb", 0), ("1g.10gb", 0)], "overlap"),
])
def test_layout_fits_reasons(placements, word):
    """Each broken rule yields a reason that says which rule."""
    reason = layout_fits(H100, placements)
    assert reason is not None and word in reason


def test_compute_slices_limit_applies_to_a30():
    """On A30 (4 compute slices) a 4g plus anything is refused."""
    assert layout_fits(A30, [("4g.24gb", 0)]) is None
    assert layout_fits(A30, [("2g.12gb", 0), ("2g.12gb", 2)]) is None


def test_only_one_media_extension_instance_per_gpu():
    """The single OFA unit allows one +me instance: A30 1g+me and 2g+me cannot coexist."""
    reason = layout_fits(A30, [("1g.6gb+me", 0), ("2g.12gb+me", 2)])
    assert reason is not None and "OFA" in reason


def test_non_mig_model_refuses_placements():
    """A T4 has no MIG, so any placement is refused; an empty layout is fine."""
    assert layout_fits(MODELS["T4"], []) is None
    assert "not MIG-capable" in layout_fits(MODELS["T4"], [("1g.5gb", 0)])


# --- first_free_start / remaining_capacity ----------------------------------------------


def test_first_free_start():
    """The first free start skips occupied slices and respects allowed starts."""
    assert first_free_start(H100, [], "3g.40gb") == 0
    assert first_free_start(H100, [("3g.40gb", 0)], "3g.40gb") == 4
    assert first_free_start(H100, [("1g.10gb", 0)], "2g.20gb") == 2
    assert first_free_start(H100, [("4g.40gb", 0), ("3g.40gb", 4)], "1g.10gb") is None


@pytest.mark.parametrize("taken,profile,expected", [
    ([], "1g.10gb", 7),  # starts 0..6
    ([], "1g.20gb", 4),  # starts 0,2,4,6
    ([], "3g.40gb", 2),
    ([], "1g.10gb+me", 1),  # 7 starts free, but instanceCount 1
    ([("4g.40gb", 0)], "1g.10gb", 3),  # slices 4,5,6 (7 is never a start)
    ([("1g.10gb", 1)], "2g.20gb", 2),  # 0 blocked by slice 1; 2 and 4 free
    ([("3g.40gb", 4)], "3g.40gb", 1),
    ([("7g.80gb", 0)], "1g.10gb", 0),
    ([("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)], "1g.20gb", 1),  # slices 6-7 left
])
def test_remaining_capacity(taken, profile, expected):
    """Remaining capacity counts instances that fit simultaneously, hand-derived from §2.1."""
    assert remaining_capacity(H100, taken, profile) == expected


def test_remaining_capacity_is_zero_for_an_invalid_starting_layout():
    """An already-impossible layout leaves no capacity."""
    assert remaining_capacity(H100, [("1g.10gb", 7)], "1g.10gb") == 0


# --- enumerate_layouts ------------------------------------------------------------------


def _brute_force_layouts(model):
    """Independent check: all subsets of placements, tested with slice bitmasks."""
    profiles = {p.name: p for p in model.mig_profiles}
    cands = all_placements(model)
    ofa_budget = max(p.ofas for p in model.mig_profiles)
    valid = set()
    for k in range(1, model.compute_slices + 1):  # every instance needs >= 1 compute slice
        for combo in combinations(cands, k):
            mask = 0
            ok = True
            for name, start in combo:
                bits = ((1 << profiles[name].memory_slices) - 1) << start
                if mask & bits:
                    ok = False
                    break
                mask |= bits
            if not ok:
                continue
            names = [n for n, _ in combo]
            if any(names.count(n) > profiles[n].max_instances for n in set(names)):
                continue
            if sum(profiles[n].slice_count for n in names) > model.compute_slices:
                continue
            if sum(profiles[n].ofas for n in names) > ofa_budget:
                continue
            valid.add(frozenset(combo))
    return valid


@pytest.mark.parametrize("key", ["A30", "H100-80GB"])
def test_enumerate_layouts_matches_brute_force(key):
    """The pruned search finds exactly the subsets an independent brute force accepts."""
    model = MODELS[key]
    layouts = enumerate_layouts(model)
    assert len(layouts) == len(set(map(frozenset, layouts)))
    assert set(map(frozenset, layouts)) == _brute_force_layouts(model)


def test_a30_layout_counts_by_hand():
    """A30: 75 non-empty layouts and 17 maximal ones, counted by hand.

    Without +me each half (slices 0-1, 2-3) is empty, 2g, 1g@a, 1g@b or both 1g (5 ways),
    so 5*5-1 = 24 plus 4g alone = 25. Exactly one +me replaces one 1g (40 occurrences over
    the half-combinations) or one 2g (10): 25+40+10 = 75. Maximal: both halves full with at
    most one +me: 2*2 + 2*3*2 = 16, plus 4g alone = 17.
    """
    assert len(enumerate_layouts(A30)) == 75
    assert len(enumerate_layouts(A30, maximal_only=True)) == 17


def test_maximal_layouts_cannot_grow():
    """Every maximal H100 layout refuses every further placement, and includes all-balanced."""
    maximal = enumerate_layouts(H100, maximal_only=True)
    for layout in maximal:
        assert all(p in layout or layout_fits(H100, [*layout, p]) for p in all_placements(H100))
    balanced = frozenset({("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)})
    assert balanced in set(map(frozenset, maximal))
    assert frozenset({("1g.10gb", s) for s in range(7)}) in set(map(frozenset, maximal))


# --- driver branches (issue 25; docs/hardware-facts.md) ------------------------------------


def test_a100_80gb_sizes_are_what_real_drivers_print():
    """9.50 / 19.50 / 39.25 / 79.00 GiB (9728 / 19968 / 40192 / 80896 MiB) on every branch."""
    from exporter.catalog import board

    for driver in (None, "510.108.03", "535.104.05", "580.95.05"):
        m = board("A100-80GB", driver_version=driver)
        sizes = {p.name: p.memory_mib for p in m.mig_profiles}
        assert (sizes["1g.10gb"], sizes["2g.20gb"], sizes["3g.40gb"], sizes["7g.80gb"]) == (9728, 19968, 40192, 80896)


def test_h100_pcie_mig_sms_are_its_own():
    """H100 PCIe (114 SMs): 14/14/14/30/46/62/114, not the SXM5 table."""
    pcie = resolve_model("NVIDIA H100 PCIe")
    assert [p.sm_count for p in pcie.mig_profiles] == [14, 14, 14, 30, 46, 62, 114]
    assert [p.sm_count for p in H100.mig_profiles] == [16, 16, 26, 32, 60, 64, 132]


def test_each_branch_keeps_its_own_sizes_and_profiles():
    """A100-40GB 2g.10gb: 9984 MiB up to R510 and from R550, 9856 on R525-R545; no branch: the smaller.
    Profiles newer than the branch are absent (A30 2g.12gb+me from R525)."""
    from exporter.catalog import board, driver_branch

    assert board("A100-40GB", driver_version="470.57.02").profile("2g.10gb").memory_mib == 9984
    assert board("A100-40GB", driver_version="R525").profile("2g.10gb").memory_mib == 9856
    assert board("A100-40GB", driver_version="580.95.05").profile("7g.40gb").memory_mib == 40320  # 39.38 GiB
    assert A100_40.profile("2g.10gb").memory_mib == 9856 and A100_40.driver_branch is None
    assert "1g.10gb" not in {p.name for p in board("A100-40GB", driver_version="470.57.02").mig_profiles}
    with pytest.raises(KeyError, match="on driver branch R470"):
        board("A30", driver_version="470.57.02").profile("2g.12gb+me")
    assert board("A30").profile("2g.12gb+me").memory_mib == 11968
    assert driver_branch("580.95.05") == 580 and driver_branch(None) is None
    with pytest.raises(ValueError):
        driver_branch("latest")


def test_mig_bar1_follows_the_branch():
    """A100-40GB MIG BAR1: 32767/16383/8191 MiB before R580, 12211/6105/3052 MiB on R580."""
    from exporter.catalog import board

    for driver, expected in (("535.104.05", (32767, 16383, 8191)), ("580.126.09", (12211, 6105, 3052))):
        m = board("A100-40GB", driver_version=driver)
        assert tuple(m.mig_bar1_total_mib(m.profile(n)) for n in ("4g.20gb", "2g.10gb", "1g.5gb")) == expected
    h100 = board("H100-80GB", driver_version="580.95.05")  # R580 aperture not observed: whole BAR1
    assert h100.mig_bar1_total_mib(h100.profile("3g.40gb")) == 131072 * 4 // 8 - 1


def test_sizes_for_driver_is_restored():
    from exporter.catalog import sizes_for_driver

    with sizes_for_driver("470.57.02"):
        assert MODELS["A100-40GB"].profile("2g.10gb").memory_mib == 9984
        assert resolve_model("A100-40GB").driver_branch == 470
    assert MODELS["A100-40GB"].profile("2g.10gb").memory_mib == 9856
    assert resolve_model("A100-40GB").driver_branch is None


def test_for_driver_from_another_branch_starts_from_the_catalog():
    """A model built for R470 (no 1g.10gb) asked for R580 gets 1g.10gb back, board kept."""
    from exporter.catalog import board

    old = board("A100-40GB", "PCIe", driver_version="470.57.02")
    new = old.for_driver("580.95.05")
    assert "1g.10gb" in {p.name for p in new.mig_profiles} and new.variant == "PCIe"
    assert new.profile("2g.10gb").memory_mib == 9984
    assert [p.sm_count for p in board("H100-PCIe", driver_version="535.104.05").for_driver(None).mig_profiles][-1] == 114
