"""The simulated DCGM behaves like DCGM's bindings where the backend depends on it, and the
backend reads DCGM only through one module.

Facts checked against shared/reference/dcgm_k8s_facts.md part A (struct members, error
classes, blank sentinels, MIG hierarchy semantics, connect API by version).
"""

from __future__ import annotations

import re
from ctypes import c_void_p
from pathlib import Path

import pytest
from dcgm_helpers import embedded_engine, write_scenario

from exporter.backend import dcgm_bindings
from exporter.backend.dcgm_values import Decoder, decode
from exporter.errors import UserError
from exporter.sim import Simulation, fakedcgm
from exporter.sim.fakedcgm import registry
from exporter.sim.fakedcgm.spec import DcgmSpec
from exporter.sim.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent
B = dcgm_bindings.load((fakedcgm.BINDINGS_DIR,))


@pytest.fixture
def engine(tmp_path):
    """An embedded host engine over an A100 (3g + 2g instances) and an A30 (whole), DCGM ids swapped."""
    data = {"name": "fake", "gpus": [
        {"model": "A100-80GB", "mig": [{"profile": "2g.20gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]},
        {"model": "A30"}], "processes": [], "dcgm": {"gpu_ids": [3, 1]}}
    with embedded_engine(tmp_path, data, B) as running:
        yield running


def test_error_classes_follow_dcgm_naming():
    err = B.structs.DCGMError(-21)
    assert type(err).__name__ == "DCGMError_ConnectionNotValid" and isinstance(err, B.structs.DCGMError)
    assert err.value == -21 and str(err) == "The connection to the host engine is not valid any longer"
    assert B.structs.dcgmExceptionClass(-37).__name__ == "DCGMError_ProfilingLibraryError"
    assert B.structs.DCGMError_VerMismatch().value == -12 and str(B.structs.DCGMError(-12)) == "API version mismatch"
    for code, name in ((-29, "RequiresRoot"), (-33, "ModuleNotLoaded"), (-20, "FunctionNotFound"),
                       (-25, "LibraryNotFound"), (-36, "ProfilingNotSupported")):
        assert type(B.structs.DCGMError(code)).__name__ == "DCGMError_" + name


def test_field_value_struct_members():
    names = [f[0] for f in B.structs.c_dcgmFieldValue_v2._fields_]
    assert names == ["version", "entityGroupId", "entityId", "fieldId", "fieldType", "status", "unused", "ts", "value"]
    assert [f[0] for f in B.structs.c_dcgmFieldValue_v1_value._fields_] == ["i64", "dbl", "str", "blob"]
    assert B.fields.DCGM_FE_GPU == 1 and B.fields.DCGM_FE_GPU_I == 4 and B.fields.DCGM_FE_GPU_CI == 5


@pytest.mark.parametrize("kind,field", [("d", "dbl"), ("i", "i64"), ("s", "str")])
def test_every_blank_sentinel_decodes_to_none(kind, field):
    """BLANK, NOT_FOUND, NOT_SUPPORTED and NOT_PERMISSIONED are no value; a real value is one."""
    v = B.value
    blanks = {"d": [v.DCGM_FP64_BLANK, v.DCGM_FP64_NOT_FOUND, v.DCGM_FP64_NOT_SUPPORTED, v.DCGM_FP64_NOT_PERMISSIONED],
              "i": [v.DCGM_INT64_BLANK, v.DCGM_INT64_NOT_FOUND, v.DCGM_INT64_NOT_SUPPORTED, v.DCGM_INT64_NOT_PERMISSIONED],
              "s": [v.DCGM_STR_BLANK, v.DCGM_STR_NOT_FOUND, v.DCGM_STR_NOT_SUPPORTED, v.DCGM_STR_NOT_PERMISSIONED]}
    real = {"d": 0.0, "i": 0, "s": "GPU-x"}  # zero is a value, not a blank
    fv = B.structs.c_dcgmFieldValue_v2()
    fv.fieldType = ord(kind)
    for blank in blanks[kind]:
        setattr(fv.value, field, blank)
        assert decode(B, fv).value is None, blank
    setattr(fv.value, field, real[kind])
    assert decode(B, fv).value == real[kind]
    fv.status = -18
    assert decode(B, fv).value is None and decode(B, fv).status == -18


def test_batched_decode_matches_value_by_value():
    """Decoder.entity_readings (numbers read through the ctypes fields) gives the Readings the
    bindings' attribute path gives, for every kind, blank, status and entity in one batch."""
    v = B.value
    cases = [("d", "dbl", 41.5, 0), ("d", "dbl", v.DCGM_FP64_BLANK, 0), ("d", "dbl", v.DCGM_FP64_NOT_SUPPORTED, 0),
             ("d", "dbl", 0.0, 0), ("i", "i64", 7, 0), ("i", "i64", v.DCGM_INT64_NOT_FOUND, 0), ("i", "i64", 3, -14),
             ("t", "i64", 1_700_000_000, 0), ("s", "str", "GPU-x", 0), ("s", "str", v.DCGM_STR_BLANK, 0),
             ("d", "dbl", 2.0, -6), ("b", "i64", 5, 0)]
    values = (B.structs.c_dcgmFieldValue_v2 * len(cases))()
    for n, (kind, member, value, status) in enumerate(cases):
        fv = values[n]
        fv.entityGroupId, fv.entityId, fv.fieldId = (1, 4)[n % 2], n // 2, 100 + n
        fv.fieldType, fv.status = ord(kind), status
        setattr(fv.value, member, value)
    decoder = Decoder(B)
    expected: dict = {}
    for fv in values:
        expected.setdefault((fv.entityGroupId, fv.entityId), {})[fv.fieldId] = decode(B, fv)
    assert decoder.entity_readings(values) == expected
    assert decoder.entity_readings(list(values)) == expected
    assert expected[(1, 0)][100].value == 41.5 and expected[(4, 0)][101].value is None
    assert decoder._layout(B.structs.c_dcgmFieldValue_v2) is not None  # the fast path is the one tested

    class Described(B.structs.c_dcgmFieldValue_v2):  # a member that is not a plain ctypes field
        status = property(lambda self: -6)

    assert decoder._layout(Described) is None
    odd = (Described * 1)()
    odd[0].fieldType = ord("d")
    assert decoder.entity_readings(odd) == {(0, 0): {0: decode(B, odd[0])}} and decode(B, odd[0]).status == -6


def _values_and_statuses(readings: dict) -> tuple[dict, dict]:
    """Readings by entity -> what DcgmSession reads: (values, statuses of the failed values only)."""
    values = {entity: {fid: r.value for fid, r in per.items()} for entity, per in readings.items()}
    statuses = {entity: {fid: r.status for fid, r in per.items() if r.status}
                for entity, per in readings.items() if any(r.status for r in per.values())}
    return values, statuses


def test_session_reads_what_the_bindings_wrapper_reads(engine):
    """DcgmSession reads through libdcgm's symbol on arrays it keeps across polls; each poll's
    values and statuses equal those of the bindings' own dcgmEntitiesGetLatestValues, decoded
    value by value: with errors (an unknown GPU instance, an unwatched field), after the values
    changed, with a second read set in between, and for a set that takes the fast plan."""
    from exporter.backend.dcgm_caller import DcgmCaller
    from exporter.backend.dcgm_session import FE_GPU, FE_GPU_I, DcgmSession

    sim, _, handle = engine
    session = DcgmSession(B, DcgmCaller(B), None, 1.0)
    session.handle = handle
    session.gpu_index = {3: 0, 1: 1}
    session.watch_device()
    session.update_all()
    gpus = [(FE_GPU, 3), (FE_GPU, 1), (FE_GPU_I, 999)]
    device = (155, 156, 150, 100, 1002)  # 1002 is not watched: an error per GPU

    def wrapper_readings(entities, fields):
        pairs = []
        for group, entity in entities:
            pair = B.structs.c_dcgmGroupEntityPair_t()
            pair.entityGroupId, pair.entityId = group, entity
            pairs.append(pair)
        out: dict = {}
        for fv in B.agent.dcgmEntitiesGetLatestValues(handle, pairs, list(fields), 0):
            out.setdefault((fv.entityGroupId, fv.entityId), {})[fv.fieldId] = decode(B, fv)
        return _values_and_statuses(out)

    seen = []
    for t in (30.0, 90.0):
        sim.advance_to(t)
        first = session._latest_values(gpus, device)
        clean = session._latest_values(gpus[:2], (155, 156, 150))  # all watched numbers: the fast plan
        assert clean == wrapper_readings(gpus[:2], (155, 156, 150)) and clean[1] == {}
        assert first == wrapper_readings(gpus, device) == session._latest_values(gpus, device)
        seen.append(first)
    assert len(session._batches) == 2  # built once, reused by the second poll
    assert [plan is not None for plan in session._batches[(tuple(gpus[:2]), (155, 156, 150))]._fast.values()] == [True]
    values, statuses = seen[0]
    assert values[(FE_GPU, 3)][155] is not None and statuses[(FE_GPU, 3)][1002] != 0
    assert values[(FE_GPU, 3)][1002] is None and statuses[(FE_GPU_I, 999)][155] != 0
    # energy moved on between the polls: nothing stale was read
    assert seen[1][0][(FE_GPU, 3)][156] > values[(FE_GPU, 3)][156]


def test_batch_decode_fast_plan_matches_value_by_value():
    """dcgm_batch.Batch.decode gives the values and statuses the bindings' attribute path gives:
    numbers and blanks of both types through its fast plan (made once per record layout), and
    a status, a string, or an entity's records apart through the general way."""
    from exporter.backend.dcgm_batch import PLANS_KEPT, Batch

    v = B.value
    entities, fields = [(1, 0), (4, 7)], (100, 155, 156)
    batch = Batch(B.structs, Decoder(B), entities, fields)

    def fill(rows):
        for n, (group, entity, fid, kind, member, value, status) in enumerate(rows):
            fv = batch.values[n]
            fv.entityGroupId, fv.entityId, fv.fieldId, fv.fieldType, fv.status = group, entity, fid, ord(kind), status
            setattr(fv.value, member, value)
        readings: dict = {}
        for fv in batch.values:
            readings.setdefault((fv.entityGroupId, fv.entityId), {})[fv.fieldId] = decode(B, fv)
        return _values_and_statuses(readings)

    numbers = [(1, 0, 100, "i", "i64", 1410, 0), (1, 0, 155, "d", "dbl", 71.25, 0), (1, 0, 156, "i", "i64", 9, 0),
               (4, 7, 100, "i", "i64", v.DCGM_INT64_NOT_SUPPORTED, 0), (4, 7, 155, "d", "dbl", v.DCGM_FP64_BLANK, 0),
               (4, 7, 156, "i", "i64", 0, 0)]
    expected = fill(numbers)
    assert batch.decode() == expected and expected[0][(4, 7)] == {100: None, 155: None, 156: 0}
    assert list(batch._fast.values()) != [None] and len(batch._fast) == 1  # the fast plan did it
    fill([(*row[:5], row[5] + 1 if row[4] == "i64" and row[5] < 10 else row[5], 0) for row in numbers])
    assert batch.decode()[0][(1, 0)] == {100: 1410, 155: 71.25, 156: 10} and len(batch._fast) == 1  # plan reused

    odd_cases = [
        [*numbers[:5], (4, 7, 156, "i", "i64", 3, -14)],  # a status
        [*numbers[:4], (4, 7, 155, "s", "str", "GPU-x", 0), numbers[5]],  # a string
        [numbers[0], numbers[3], *numbers[1:3], *numbers[4:]],  # an entity's records apart
        [(1, 0, 100, "d", "dbl", 2.5, 0), *numbers[1:]],  # another type: a plan of its own
    ]
    for rows in odd_cases:
        expected = fill(rows)
        assert batch.decode() == expected, rows
    assert fill(odd_cases[0])[1] == {(4, 7): {156: -14}}
    assert sum(plan is not None for plan in batch._fast.values()) <= PLANS_KEPT


def test_library_not_installed():
    with pytest.raises(B.structs.DCGMError_LibraryNotFound):
        B.structs._dcgmInit()


def test_mig_hierarchy_rows(engine):
    """GI rows: entity (GPU_I, gpuId*maxGpcs + k), parent (GPU, gpuId), nvmlInstanceId = NVML GI id,
    nvmlComputeInstanceId -1 (unsigned), gpuUuid = the parent's, nvmlMigProfileId = the NVML profile id."""
    sim, _, handle = engine
    hierarchy = B.agent.dcgmGetGpuInstanceHierarchy(handle)
    rows = [hierarchy.entityList[n] for n in range(hierarchy.count)]
    gis = [r for r in rows if r.entity.entityGroupId == B.fields.DCGM_FE_GPU_I]
    assert {(r.entity.entityId, r.parent.entityId, r.info.nvmlInstanceId, r.info.nvmlMigProfileId) for r in gis} == {
        (3 * 7 + 0, 3, 3, 14),  # 2g.20gb at slice 0 is GI 3, profile id 14 (profiles in enum order first)
        (3 * 7 + 1, 3, 1, 9),  # 3g.40gb at slice 4 is GI 1, profile id 9
    }
    assert all(r.info.nvmlComputeInstanceId == 0xFFFFFFFF for r in gis)
    assert all(r.info.gpuUuid == sim.engine.gpus[0].uuid and r.info.nvmlGpuIndex == 0 for r in gis)
    cis = [r for r in rows if r.entity.entityGroupId == B.fields.DCGM_FE_GPU_CI]
    assert len(cis) == 2 and all(r.parent.entityGroupId == B.fields.DCGM_FE_GPU_I for r in cis)


def test_gpu_ids_and_uuids(engine):
    sim, _, handle = engine
    assert B.agent.dcgmGetAllSupportedDevices(handle) == [1, 3]
    assert B.agent.dcgmGetDeviceAttributes(handle, 3).identifiers.uuid == sim.engine.gpus[0].uuid
    assert B.agent.dcgmGetDeviceAttributes(handle, 1).identifiers.uuid == sim.engine.gpus[1].uuid


def test_watch_errors(engine):
    """Unknown handle, unsupported profiling field, duplicate field group name: DCGM's errors."""
    _, _, handle = engine
    with pytest.raises(B.structs.DCGMError_Badparam):
        B.agent.dcgmUpdateAllFields(c_void_p(12345), 1)
    B.agent.dcgmFieldGroupCreate(handle, [1002], "name")
    with pytest.raises(B.structs.DCGMError_DuplicateKey):
        B.agent.dcgmFieldGroupCreate(handle, [1002], "name")
    with pytest.raises(B.structs.DCGMError_UnknownField):
        B.agent.dcgmFieldGroupCreate(handle, [9999], "other")


def test_unwatched_and_first_values(engine):
    """Unwatched fields come back NOT_WATCHED; watched profiling fields are blank until an interval passed."""
    sim, _, handle = engine
    pair = B.structs.c_dcgmGroupEntityPair_t()
    pair.entityGroupId, pair.entityId = B.fields.DCGM_FE_GPU, 1
    (fv,) = B.agent.dcgmEntitiesGetLatestValues(handle, [pair], [155], 0)
    assert fv.status == -16
    group = B.agent.dcgmGroupCreate(handle, B.structs.DCGM_GROUP_EMPTY, "g")
    B.agent.dcgmGroupAddEntity(handle, group, B.fields.DCGM_FE_GPU, 1)
    B.agent.dcgmWatchFields(handle, group, B.agent.dcgmFieldGroupCreate(handle, [155, 1002], "f"), 1_000_000, 10.0, 2)
    B.agent.dcgmUpdateAllFields(handle, 1)
    power, sm = B.agent.dcgmEntitiesGetLatestValues(handle, [pair], [155, 1002], 0)
    assert decode(B, power).value == pytest.approx(sim.engine.telemetry.power_w(1, 0.0)) and decode(B, sm).value is None
    sim.advance_to(2.0)
    power, sm = B.agent.dcgmEntitiesGetLatestValues(handle, [pair], [155, 1002], 0)
    assert decode(B, sm).value == 0.0  # idle: zero, a value


def test_connect_v3_absent_before_dcgm_45(tmp_path):
    data = {"name": "v3", "gpus": [{"model": "A30"}], "processes": [], "dcgm": {"version": "4.4.2"}}
    scenario = load_scenario(write_scenario(tmp_path, data))
    with Simulation(scenario) as sim:
        lib = fakedcgm.install(sim, scenario.dcgm)
        try:
            B.structs._dcgmInit()
            params = B.structs.c_dcgmConnectV3Params_v1()
            with pytest.raises(B.structs.DCGMError_FunctionNotFound):
                B.agent.dcgmConnect_v3("tcp://127.0.0.1:5555", params)
            handle = B.agent.dcgmConnect_v2("127.0.0.1:5555", B.structs.c_dcgmConnectV2Params_v2())
            assert handle.value
            assert "version:4.4.2" in B.agent.dcgmVersionInfo().rawBuildInfoString
        finally:
            fakedcgm.uninstall(lib)


def test_bindings_loader_refuses_cleanly(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(dcgm_bindings.BindingsNotFound, match=re.escape(f"looked in {empty})")):
        dcgm_bindings.load((str(empty),))
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("dcgm_structs", "dcgm_fields", "dcgmvalue"):
        (broken / f"{name}.py").write_text("")
    (broken / "dcgm_agent.py").write_text("raise SystemError('libdcgm.so.4: cannot open shared object file')\n")
    try:
        with pytest.raises(dcgm_bindings.BindingsNotFound, match=r"failed to import: SystemError: libdcgm"):
            dcgm_bindings.load((str(broken),))
    finally:
        dcgm_bindings.load((fakedcgm.BINDINGS_DIR,))  # put the fake modules back for the other tests
    assert dcgm_bindings.search_dirs("/opt/dcgm") == ("/opt/dcgm",)
    assert dcgm_bindings.search_dirs(None)[:2] == ("/usr/share/datacenter-gpu-manager-4/bindings/python3",
                                                    "/usr/local/dcgm/bindings/python3")


def test_only_one_module_imports_the_bindings():
    """exporter/backend/dcgm_bindings.py is the only importer of DCGM's modules (outside the fake)."""
    pattern = re.compile(r"^\s*(import|from)\s+(pydcgm|dcgm_structs|dcgm_fields|dcgm_agent|dcgmvalue|DcgmReader)\b",
                         re.MULTILINE)
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "exporter").rglob("*.py")
                 if pattern.search(p.read_text()) and "fakedcgm/bindings" not in str(p)]
    assert offenders == []
    assert "importlib.import_module(name)" in (REPO / "exporter/backend/dcgm_bindings.py").read_text()


@pytest.mark.parametrize("section,message", [
    ({"faults": [{"kind": "profiling_lok"}]}, "dcgm.faults[0].kind: unknown DCGM fault 'profiling_lok' (did you mean 'profiling_lock'?)"),
    ({"faults": [{"kind": "hostengine_down", "at": "2m", "until": "1m"}]}, "dcgm.faults[0].until: until 1m must be after at 2m"),
    ({"gpu_ids": [0, 0]}, "dcgm.gpu_ids: needs 2 distinct ids"),
    ({"unsupported_fields": [{"gpu": 0, "fields": [155]}]}, "dcgm.unsupported_fields[0].fields[0]: only the profiling fields"),
    ({"version": "5.0"}, "dcgm.version: expected a DCGM 3.x or 4.x version"),
    ({"root": "no"}, "dcgm.root:"),
    ({"rooot": False}, "dcgm.rooot:"),
])
def test_dcgm_section_errors_are_one_line(tmp_path, section, message):
    data = {"name": "bad", "gpus": [{"model": "A30"}, {"model": "A30"}], "dcgm": section}
    with pytest.raises(UserError) as info:
        load_scenario(write_scenario(tmp_path, data))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_dcgm_section_defaults(tmp_path):
    scenario = load_scenario(write_scenario(tmp_path, {"name": "d", "gpus": [{"model": "A30"}], "dcgm": {}}))
    assert scenario.dcgm == DcgmSpec()
    assert load_scenario(write_scenario(tmp_path, {"name": "n", "gpus": [{"model": "A30"}]}, "n.yaml")).dcgm is None


HEALTH_FIELDS = [140, 202, 206, 207, *range(240, 246), 390, 391, 392, 393, 394, 395, 396]


def test_health_fields_per_gpu_and_per_gpu_instance(engine):
    """Issue 21's fields: served on GPU entities; asked on a GPU instance, DCGM remaps a GPU-level
    field to the parent GPU (the same value). Retired pages are blank on Ampere (row remapping
    instead); remapped rows are blank while MIG has instances (as NVML answers NotSupported)."""
    sim, _, handle = engine
    hierarchy = B.agent.dcgmGetGpuInstanceHierarchy(handle)
    gi_entity = next(hierarchy.entityList[n].entity.entityId for n in range(hierarchy.count)
                     if hierarchy.entityList[n].entity.entityGroupId == B.fields.DCGM_FE_GPU_I)
    pairs = []
    for group, entity in ((B.fields.DCGM_FE_GPU, 3), (B.fields.DCGM_FE_GPU_I, gi_entity), (B.fields.DCGM_FE_GPU, 1)):
        pair = B.structs.c_dcgmGroupEntityPair_t()
        pair.entityGroupId, pair.entityId = group, entity
        pairs.append(pair)
    group = B.agent.dcgmGroupCreate(handle, B.structs.DCGM_GROUP_EMPTY, "h")
    for pair in pairs:
        B.agent.dcgmGroupAddEntity(handle, group, pair.entityGroupId, pair.entityId)
    B.agent.dcgmWatchFields(handle, group, B.agent.dcgmFieldGroupCreate(handle, HEALTH_FIELDS, "hf"),
                            1_000_000, 10.0, 2)
    B.agent.dcgmUpdateAllFields(handle, 1)
    got: dict = {}
    for fv in B.agent.dcgmEntitiesGetLatestValues(handle, pairs, HEALTH_FIELDS, 0):
        got[(fv.entityGroupId, fv.entityId, fv.fieldId)] = decode(B, fv).value
    a100 = {fid: got[(B.fields.DCGM_FE_GPU, 3, fid)] for fid in HEALTH_FIELDS}
    on_gi = {fid: got[(B.fields.DCGM_FE_GPU_I, gi_entity, fid)] for fid in HEALTH_FIELDS}
    a30 = {fid: got[(B.fields.DCGM_FE_GPU, 1, fid)] for fid in HEALTH_FIELDS}
    assert on_gi == a100  # remapped to the parent
    expected_temp = round(sim.engine.telemetry.temperature_c(0, sim.time)) + 8
    assert a100[140] == expected_temp and a100[202] == 0 and a100[240] == 0
    assert a100[206] is None and a100[207] is None  # media engines: NotSupported with MIG on
    assert [a100[f] for f in (390, 391, 392)] == [None] * 3  # Ampere retires no pages
    assert [a100[f] for f in (393, 394, 395, 396)] == [None] * 4  # MIG with instances
    assert [a30[f] for f in (393, 394, 395, 396)] == [0] * 4  # HBM2, MIG off: a row remapper
    assert a30[206] == 0 and a30[390] is None


def test_symbols_cached_by_name_as_the_real_bindings(engine, tmp_path):
    """dcgm_structs._dcgmGetFunctionPointer caches a symbol after its first look-up (the real
    module's _dcgmGetFunctionPointer_cache); a missing symbol raises and is not cached; binding
    another library starts a new cache and leaves the old one as it was."""
    sim, lib, handle = engine
    structs = B.structs
    first = structs._dcgmGetFunctionPointer("dcgmEntitiesGetLatestValues")
    cache = structs._dcgmGetFunctionPointer_cache
    assert cache["dcgmEntitiesGetLatestValues"] is first
    assert structs._dcgmGetFunctionPointer("dcgmEntitiesGetLatestValues") is first
    before = lib.call_counts["dcgmGetAllSupportedDevices"]
    assert B.agent.dcgmGetAllSupportedDevices(handle) == [1, 3]  # a wrapper's call goes through the cache
    assert "dcgmGetAllSupportedDevices" in cache and lib.call_counts["dcgmGetAllSupportedDevices"] == before + 1
    with pytest.raises(structs.DCGMError_FunctionNotFound):
        structs._dcgmGetFunctionPointer("dcgmNoSuchSymbol")
    assert "dcgmNoSuchSymbol" not in cache
    kept = dict(cache)
    data = {"name": "other", "gpus": [{"model": "A30"}], "processes": [], "dcgm": {}}
    scenario = load_scenario(write_scenario(tmp_path, data, "other.yaml"))
    with Simulation(scenario) as other_sim:
        other = fakedcgm.install(other_sim, scenario.dcgm)
        try:
            structs._dcgmInit()
            assert structs.dcgmLib is other and structs._dcgmGetFunctionPointer_cache == {}
            assert structs._dcgmGetFunctionPointer("dcgmEntitiesGetLatestValues") is not first
            assert cache == kept  # the first library's symbols, untouched
            structs._dcgmInit()  # the same library again: its cache stays
            assert "dcgmEntitiesGetLatestValues" in structs._dcgmGetFunctionPointer_cache
        finally:
            fakedcgm.uninstall(other)
            registry.install(lib)  # the fixture's library, as it was
            structs._dcgmInit()
