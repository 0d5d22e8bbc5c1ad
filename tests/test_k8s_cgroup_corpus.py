"""Real nodes' /proc/<pid>/cgroup files, as published in bug reports and runtime sources.

Each file under tests/data/cgroup quotes what a node printed (its header cites where) and says
which pod UID, container id and runtime it names; the exporter's parser must find exactly that,
both from the text and through a fake /proc tree read by the exporter's own ProcFs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.backend.procinfo import ProcFs
from exporter.k8s.cgroup import CgroupRef, parse_cgroup

CORPUS = Path(__file__).parent / "data" / "cgroup"
FILES = sorted(CORPUS.glob("*.txt"))


def _read(path: Path) -> tuple[str, CgroupRef | None, str]:
    """(cgroup text, expected reference, source url) of one corpus file."""
    header: dict[str, str] = {}
    body: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            key, _, value = line[1:].strip().partition(":")
            header.setdefault(key.strip(), value.strip())
        else:
            body.append(line)
    fields = dict(item.split("=", 1) for item in header["expect"].split())
    if not fields["pod"] and not fields["container"]:
        expected = None
    else:
        expected = CgroupRef(fields["pod"] or None, fields["container"] or None, fields["runtime"])
    return "\n".join(body) + "\n", expected, header["source"]


def test_the_corpus_covers_every_runtime_and_driver_shape():
    names = {path.stem for path in FILES}
    assert len(FILES) >= 12
    # the two shapes real nodes produced that the parser once missed
    assert "crio-cgroupfs-container-v1" in names
    assert "containerd-systemd-format-as-directory-v1" in names
    for path in FILES:
        _, _, source = _read(path)
        assert source.startswith("https://github.com/"), path.name


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_published_cgroup_file_names_its_pod_and_container(path):
    text, expected, _ = _read(path)
    got = parse_cgroup(text)
    if expected is None:
        assert got is None or got.container_id is None
    else:
        assert got == expected


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_the_exporters_procfs_reads_the_same_from_a_proc_tree(tmp_path, path):
    text, expected, _ = _read(path)
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(text)
    got = parse_cgroup(ProcFs(str(tmp_path)).cgroup(4242))
    if expected is None:
        assert got is None or got.container_id is None
    else:
        assert got == expected


def test_conmon_is_in_the_pod_but_never_a_container():
    text, _, _ = _read(CORPUS / "crio-cgroupfs-conmon-v1.txt")
    got = parse_cgroup(text)
    assert got is not None and got.pod_uid == "5884dc6c-5b0c-11e9-90bc-525400cfa589"
    assert got.container_id is None
