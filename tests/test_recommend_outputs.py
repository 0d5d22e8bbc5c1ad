"""Output formats: mig-parted schema, json/yaml data, markdown, and the HTML in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from exporter import catalog
from exporter.recommend.outputs_data import render_json, render_yaml
from exporter.recommend.outputs_html import render_html
from exporter.recommend.outputs_migparted import device_ids, render_migparted
from exporter.recommend.outputs_text import render_markdown, render_text
from exporter.recommend.plan_file import load_plan, parse_plan
from exporter.recommend.report import recommend

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "workloads"

# nvidia-mig-parted api/spec/v1 (spec.go) and pkg/types (mig_profile.go, mig_config.go):
# top level exactly {version: "v1", mig-configs: non-empty map}; each config a non-empty list of
# entries with keys from {devices, device-filter, mig-enabled, mig-devices}; devices "all" or a
# list of ints; mig-enabled a bool; mig-devices required when enabled, empty when not; profile
# names "[<c>c.]<g>g.<gb>gb[+me]"; counts non-negative ints, not all zero.
PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:\+me)?$")


def validate_mig_parted(doc) -> list[str]:
    errors = []
    if not isinstance(doc, dict) or set(doc) != {"version", "mig-configs"}:
        return [f"top-level keys {sorted(doc) if isinstance(doc, dict) else doc!r}"]
    if doc["version"] != "v1":
        errors.append("version is not v1")
    configs = doc["mig-configs"]
    if not isinstance(configs, dict) or not configs:
        return errors + ["mig-configs empty or not a map"]
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            errors.append(f"{name}: needs at least one entry")
            continue
        for e in entries:
            unknown = set(e) - {"devices", "device-filter", "mig-enabled", "mig-devices"}
            if unknown or "devices" not in e or "mig-enabled" not in e:
                errors.append(f"{name}: keys {sorted(e)}")
                continue
            devices = e["devices"]
            if devices != "all" and not (isinstance(devices, list) and all(isinstance(d, int) for d in devices)):
                errors.append(f"{name}: devices {devices!r}")
            f = e.get("device-filter")
            if f is not None and not (isinstance(f, str) or (isinstance(f, list) and all(isinstance(x, str) for x in f))):
                errors.append(f"{name}: device-filter {f!r}")
            if not isinstance(e["mig-enabled"], bool):
                errors.append(f"{name}: mig-enabled not a bool")
            md = e.get("mig-devices")
            if e["mig-enabled"]:
                if not isinstance(md, dict) or not md or not any(v > 0 for v in md.values()):
                    errors.append(f"{name}: mig-devices missing or all zero")
                    continue
                for profile, count in md.items():
                    if not PROFILE.match(str(profile)) or not isinstance(count, int) or count < 0:
                        errors.append(f"{name}: {profile}: {count!r}")
            elif md:
                errors.append(f"{name}: mig-devices given with MIG disabled")
    return errors


def _models_by_pci():
    return {pci: catalog.MODELS[key] for key in catalog.MODELS for pci in device_ids(key)}


def test_mig_parted_output_matches_the_schema_and_every_layout_fits():
    """The mixed example's mig-parted file validates, and each config's counts fit the GPUs it filters."""
    rec = recommend(load_plan(str(EXAMPLES / "mixed-inference.yaml")))
    doc = yaml.safe_load(render_migparted(rec))
    assert validate_mig_parted(doc) == []
    for name, entries in doc["mig-configs"].items():
        for e in entries:
            if not e["mig-enabled"]:
                continue
            want = Counter(e["mig-devices"])
            for pci in e["device-filter"]:
                model = _models_by_pci()[pci]
                layouts = [Counter(n for n, _ in lay) for lay in catalog.enumerate_layouts(model)]
                assert want in layouts, f"{name} does not fit {model.key}"


def test_mig_parted_has_one_config_per_distinct_layout():
    """Config names are the distinct layouts of the plan (MIG off included)."""
    rec = recommend(load_plan(str(EXAMPLES / "mixed-inference.yaml")))
    doc = yaml.safe_load(render_migparted(rec))
    planned = {g.config for p in rec.plans for g in p.gpus if g.change != "release"}
    assert set(doc["mig-configs"]) == planned


def test_mig_parted_filters_name_every_pci_id_of_the_model():
    """A config that would skip the PCIe cards does nothing there: SXM and PCIe ids are both listed."""
    rec = recommend(load_plan(str(EXAMPLES / "mixed-inference.yaml")))
    doc = yaml.safe_load(render_migparted(rec))
    filters = {tuple(e["device-filter"]) for entries in doc["mig-configs"].values() for e in entries}
    assert ("0x20B210DE", "0x20B510DE") in filters  # A100 80GB SXM4 and PCIe
    assert all("0x233010DE" in f and "0x233110DE" in f for f in filters if "0x233010DE" in f)  # H100 SXM5, PCIe
    assert device_ids("H200") == ["0x233510DE", "0x233B10DE"]
    assert device_ids("A100-40GB") == ["0x20B010DE", "0x20F110DE"]


def test_mig_parted_lists_released_gpus_explicitly_and_names_its_basis():
    """Every GPU of an existing node is listed by index (released ones in an entry of their own, MIG
    off), so no `devices: all` entry catches them; the header names the plan, input and date."""
    rec = recommend(parse_plan({
        "gpu_model": "H100-80GB",
        "fleet": [{"node": "gpu-node-1.example:18474", "gpu_model": "H100-80GB", "gpus": 3,
                   "layout": {"1g.20gb": 4}}],
        "workloads": [{"name": "llama", "count": 4, "params": "8B", "precision": "fp16"}],
    }, "plan.yaml"))
    text = render_migparted(rec)
    doc = yaml.safe_load(text)
    assert validate_mig_parted(doc) == []
    (name,) = doc["mig-configs"]
    assert name == "node-gpu-node-1.example-18474"
    entries = doc["mig-configs"][name]
    assert [(e["devices"], e["mig-enabled"]) for e in entries] == [([0], True), ([1, 2], False)]
    assert "released on gpu-node-1.example:18474: gpu1, gpu2" in text
    assert "# input: plan plan.yaml" in text and "undated plan" in text


def test_mig_parted_gives_a_node_with_mixed_layouts_its_own_config():
    """Two GPUs of one node with different layouts: a per-node config lists each GPU index once."""
    rec = recommend(parse_plan({
        "gpu_model": "H100-80GB", "fleet": [{"node": "node-a", "gpu_model": "H100-80GB", "gpus": 2}],
        "workloads": [{"name": "small", "count": 7, "memory": "8GB"}, {"name": "big", "memory": "60GiB"}],
    }))
    doc = yaml.safe_load(render_migparted(rec))
    assert validate_mig_parted(doc) == []
    node = doc["mig-configs"]["node-node-a"]
    assert sorted(d for e in node for d in e["devices"]) == [0, 1]
    assert {e["mig-enabled"] for e in node} == {True, False}


def test_schema_check_rejects_what_mig_parted_rejects():
    """The validator above is not vacuous: enabled without devices, bad names and extra keys fail."""
    bad = {"version": "v1", "mig-configs": {
        "a": [{"devices": "all", "mig-enabled": True}],
        "b": [{"devices": "some", "mig-enabled": False}],
        "c": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40GB": 1}}],
        "d": [{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}],
        "e": [{"devices": "all", "mig-enabled": False, "extra": 1}],
    }}
    assert len(validate_mig_parted(bad)) == 5


def test_json_and_yaml_carry_the_same_plan():
    """json and yaml parse to the same data, with the GPU count and the env settings."""
    rec = recommend(load_plan(str(EXAMPLES / "wan22-5b-x3.yaml")))
    data = json.loads(render_json(rec))
    assert yaml.safe_load(render_yaml(rec)) == data
    (model,) = data["models"]
    assert model["gpus_needed"] == 2 and model["mps_alternative"]["gpus"] == 1
    env = model["mps_alternative"]["devices"][0]["clients"][1]["env"]
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].startswith("0=")


def test_text_and_markdown_show_the_table_and_reasons():
    """Text has the GPU table and reasons; markdown a pipe table."""
    rec = recommend(load_plan(str(EXAMPLES / "llama-8b-x4.yaml")))
    text = render_text(rec)
    assert "all-1g.20gb" in text and "(optimal" in text and "llama-3.1-8b #4" in text
    md = render_markdown(rec)
    assert "| GPU | change | now | config | instances |" in md


def test_text_uses_plural_forms_and_says_the_summary_once():
    """'1 GPU', '1 workload'; the kept/reconfigured/released/added summary appears once."""
    rec = recommend(parse_plan({
        "gpu_model": "H100-80GB", "fleet": [{"node": "n1", "gpu_model": "H100-80GB", "gpus": 2}],
        "workloads": [{"name": "big", "memory": "60GiB"}]}))
    text = render_text(rec)
    assert "1 GPU " in text or "1 GPU:" in text or "1 GPU (" in text
    assert "1 GPUs" not in text and "1 workloads" not in text
    assert text.count("kept,") == 1 and text.count("Summary:") == 1
    assert "H100-80GB: 1 GPU (the fleet has 2): 1 kept, 0 reconfigured, 1 released, 0 to add" in text


@pytest.mark.parametrize("fmt", ["text", "json", "yaml", "markdown", "html", "mig-parted"])
def test_the_same_input_gives_the_same_bytes(fmt):
    """No clock and no solve time in any format: two runs render byte-identical output."""
    from exporter.recommend.command import render

    plan = load_plan(str(EXAMPLES / "mixed-inference.yaml"))
    assert render(recommend(plan), fmt) == render(recommend(plan), fmt)


def test_text_and_mig_parted_name_the_same_configs():
    """The configs the text report names are the ones the mig-parted file defines."""
    rec = recommend(load_plan(str(EXAMPLES / "mixed-inference.yaml")))
    doc = yaml.safe_load(render_migparted(rec))
    named = {g.config for p in rec.plans for g in p.gpus}
    assert named == set(doc["mig-configs"])
    text = render_text(rec)
    assert all(config in text for config in named)


class _Svgs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.classes, self.external = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "svg":
            self.classes.append(attrs.get("class"))
        for key in ("src", "href"):
            if attrs.get(key, "").startswith(("http:", "https:", "//")):
                self.external.append(attrs[key])


def test_html_has_one_gpu_svg_per_gpu_and_fetches_nothing():
    """Self-contained: no external resource, one svg.gpu per planned GPU, a stagger timeline."""
    rec = recommend(load_plan(str(EXAMPLES / "wan22-5b-x3.yaml")))
    parser = _Svgs()
    parser.feed(render_html(rec))
    assert not parser.external
    assert parser.classes.count("gpu") == sum(len(p.gpus) for p in rec.plans)
    assert parser.classes.count("stagger") == 1


def test_html_has_a_stamp_legend_how_to_apply_axes_and_full_names():
    """What a reader needs: the plan's date and the exporter version, a legend, how to apply it, axes
    and a time scale on the MPS timeline, and workload names in full."""
    rec = recommend(load_plan(str(EXAMPLES / "wan22-5b-x3.yaml")))
    page = render_html(rec)
    assert "Undated plan (no observed input) &middot; gpushare-exporter " in page
    assert "<h2>Legend</h2>" in page and "stranded" in page and "free at the peak moment" in page
    assert "<h2>How to apply</h2>" in page and "nvidia.com/mig.config=" in page and "nvidia-mig-parted apply" in page
    assert ">GiB</text>" in page and " min</text>" in page and f"device memory {catalog.MODELS['H100-80GB'].memory_capacity_bytes / 2**30:.1f} GiB" in page
    assert page.count("wan2.2-t2v-5b") >= 6  # full names in the lists under the GPUs and in the tables


def test_html_compares_models_side_by_side():
    """With several GPU models the summary is one column per model."""
    from exporter.recommend.demand import merge

    plan = load_plan(str(EXAMPLES / "llama-8b-x4.yaml"))
    from dataclasses import replace

    rec = recommend(replace(merge([plan]), targets=("H100-80GB", "A100-80GB", "B200")))
    page = render_html(rec)
    head = page[page.index("<h2>Summary</h2>"):]
    head = head[:head.index("</table>")]
    assert head.count("<th>H100-80GB</th>") == head.count("<th>A100-80GB</th>") == head.count("<th>B200</th>") == 1
    assert "kept / reconfigured / released / added" in head


def _png_pixels(data: bytes):
    """Decode an 8-bit RGB/RGBA non-interlaced PNG into rows of bytes (no PIL needed)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return rows, bpp


def test_html_renders_in_headless_chromium(tmp_path):
    """Debian chromium draws the page: the screenshot is not blank and shows the GPUs' colours."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    page = tmp_path / "plan.html"
    page.write_text(render_html(recommend(load_plan(str(EXAMPLES / "wan22-5b-x3.yaml")))))
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=900,700", page.as_uri()],
                   capture_output=True, timeout=120, check=False)
    assert shot.exists(), "chromium wrote no screenshot"
    rows, bpp = _png_pixels(shot.read_bytes())
    colours = Counter(row[i:i + 3] for row in rows[::4] for i in range(0, len(row), bpp * 4))
    white = colours.get(b"\xff\xff\xff", 0)
    assert white < 0.97 * sum(colours.values())  # something is drawn
    assert len(colours) > 20  # text and several fills, not a flat error page
