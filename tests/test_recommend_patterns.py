"""Layout patterns for the planner, checked against the combinations NVIDIA documents."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from exporter import catalog
from exporter.recommend.patterns import config_name, layout_for_pattern, model_patterns, planning_profiles


def _restricted(key: str, names: set[str]):
    model = catalog.MODELS[key]
    return dataclasses.replace(model, mig_profiles=tuple(p for p in model.mig_profiles if p.name in names))


@pytest.mark.parametrize("key,names", [
    ("A100-40GB", {"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}),
    ("A100-80GB", {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}),
    ("H100-80GB", {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}),
])
def test_classic_profiles_give_the_19_documented_a100_combinations(key, names):
    """The MIG user guide draws 19 valid A100 configurations of 1g/2g/3g/4g/7g (4g+3g included since R510).

    Counted by hand from the placement rules: the first half (slices 0-3) holds 4g, 3g, 2g+2g,
    2g+1g+1g, 1g+1g+2g or four 1g; the second half (4-7) holds 3g, 2g+1g or 1g+1g+1g (slice 7 is
    reachable only by a 2-slice instance), so 6 x 3 = 18, plus 7g alone = 19.
    """
    assert len(catalog.enumerate_layouts(_restricted(key, names), maximal_only=True)) == 19


def test_a30_has_the_five_documented_combinations():
    """The MIG guide's A30 figure: 4g.24gb; 2g+2g; 2g+1g+1g; 1g+1g+2g; four 1g."""
    plain = _restricted("A30", {"1g.6gb", "2g.12gb", "4g.24gb"})
    assert len(catalog.enumerate_layouts(plain, maximal_only=True)) == 5


@pytest.mark.parametrize("key", [k for k, m in catalog.MODELS.items() if m.mig_capable])
def test_every_pattern_has_a_valid_layout_with_its_counts(key):
    """Each pattern's representative layout passes the catalog's placement rules and has the pattern's counts."""
    mp = model_patterns(key)
    for pattern, layout in zip(mp.patterns, mp.layouts):
        assert catalog.layout_fits(mp.model, layout) is None
        counts = Counter(name for name, _ in layout)
        assert tuple(counts.get(p.name, 0) for p in mp.profiles) == pattern


@pytest.mark.parametrize("key", [k for k, m in catalog.MODELS.items() if m.mig_capable])
def test_patterns_are_undominated_and_cover_every_valid_layout(key):
    """No pattern is contained in another, and every valid layout's counts fit inside some pattern."""
    mp = model_patterns(key)
    for p in mp.patterns:
        assert not any(q != p and all(a >= b for a, b in zip(q, p)) for q in mp.patterns)
    plain = dataclasses.replace(mp.model, mig_profiles=mp.profiles)
    for layout in catalog.enumerate_layouts(plain):
        counts = Counter(name for name, _ in layout)
        vector = [counts.get(p.name, 0) for p in mp.profiles]
        assert any(all(a >= b for a, b in zip(p, vector)) for p in mp.patterns)


def test_media_extension_profiles_are_not_planned():
    """+me profiles only add media engines no input measures, so the planner leaves them out."""
    names = [p.name for p in planning_profiles(catalog.MODELS["H100-80GB"])]
    assert names == ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


def test_sub_pattern_layout_drops_surplus_instances():
    """A pattern that is not maximal still gets a valid layout with exactly its counts."""
    mp = model_patterns("H100-80GB")
    want = tuple(1 if p.name == "3g.40gb" else 0 for p in mp.profiles)
    layout = layout_for_pattern(mp, want)
    assert [name for name, _ in layout] == ["3g.40gb"]
    assert catalog.layout_fits(mp.model, layout) is None


def test_config_names_follow_oci_for_full_homogeneous_layouts_only():
    """all-<profile> only when the GPU holds as many as fit (OCI's all-3g.40gb is two), custom- otherwise."""
    mp = model_patterns("H100-80GB")
    idx = {p.name: i for i, p in enumerate(mp.profiles)}

    def vec(**counts):
        v = [0] * len(mp.profiles)
        for name, n in counts.items():
            v[idx[name.replace("_", ".")]] = n
        return tuple(v)

    assert config_name(mp, vec(**{"3g_40gb": 2})) == "all-3g.40gb"
    assert config_name(mp, vec(**{"3g_40gb": 1})) == "custom-1x3g.40gb"
    assert config_name(mp, vec(**{"1g_20gb": 4})) == "all-1g.20gb"
