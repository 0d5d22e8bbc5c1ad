"""Tests for exporter.units: sizes, MPS sizes and durations."""

import pytest

from exporter.units import parse_bytes, parse_duration, parse_mps_pinned_limits, parse_mps_size

GIB = 2**30


@pytest.mark.parametrize("text,expected", [
    (512, 512),
    ("512", 512),
    ("2GiB", 2 * GIB),
    ("22 GiB", 22 * GIB),
    ("1.5GiB", 3 * GIB // 2),
    ("500MB", 500 * 10**6),
    ("2GB", 2 * 10**9),
    ("4KiB", 4096),
    ("3MiB", 3 * 2**20),
    ("1TiB", 2**40),
    ("7KB", 7000),
    ("1TB", 10**12),
    ("9B", 9),
    ("2gib", 2 * GIB),
])
def test_parse_bytes(text, expected):
    """Decimal units are powers of 10, binary units powers of 2, bare numbers are bytes."""
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text,fragment", [
    ("22 GXB", "bad size '22 GXB': unknown unit 'GXB'"),
    ("1.5B", "not a whole number"),
    ("-1GiB", "bad size"),
    ("GiB", "bad size"),
    ("", "bad size"),
    (True, "bad size"),
    ([1], "bad size"),
    (-5, "negative"),
])
def test_parse_bytes_errors(text, fragment):
    """Bad sizes raise ValueError with a short message quoting the value."""
    with pytest.raises(ValueError) as info:
        parse_bytes(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize("text,expected", [
    ("30G", 30 * GIB), ("900M", 900 * 2**20), ("1g", GIB), ("512MB", 512 * 2**20),
])
def test_parse_mps_size(text, expected):
    """MPS G/M suffixes are binary multiples, as CUDA interprets them."""
    assert parse_mps_size(text) == expected


@pytest.mark.parametrize("text", ["30GiB", "30", 30, "30T", "G"])
def test_parse_mps_size_errors(text):
    """MPS sizes need a G or M unit."""
    with pytest.raises(ValueError, match="bad MPS size"):
        parse_mps_size(text)


@pytest.mark.parametrize("text,expected", [
    (90, 90.0), (1.5, 1.5), ("90", 90.0), ("90s", 90.0), ("1h2m3s", 3723.0),
    ("9m30s", 570.0), ("500ms", 0.5), ("1.5s", 1.5), ("5m", 300.0), ("2h", 7200.0),
    ("0s", 0.0), ("1m500ms", 60.5),
])
def test_parse_duration(text, expected):
    """Durations combine h, m, s, ms parts into seconds."""
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["5x", "m", "5m5m", "-3", "1h 2m", "abc", None, True, "nan"])
def test_parse_duration_errors(text):
    """Bad durations raise ValueError starting with 'bad duration'."""
    with pytest.raises(ValueError, match="^bad duration"):
        parse_duration(text)


def test_parse_mps_pinned_limits():
    """CUDA_MPS_PINNED_DEVICE_MEM_LIMIT maps each device (ordinal or UUID) to bytes."""
    assert parse_mps_pinned_limits("0=30G") == {"0": 30 * GIB}
    assert parse_mps_pinned_limits("0=1G, 1=512MB") == {"0": GIB, "1": 512 * 2**20}
    assert parse_mps_pinned_limits("GPU-abc=900M") == {"GPU-abc": 900 * 2**20}


@pytest.mark.parametrize("text", ["30G", "=3G", "0=", "0=3T"])
def test_parse_mps_pinned_limits_errors(text):
    """Items without a device, or with a bad size, are refused."""
    with pytest.raises(ValueError, match="bad MPS"):
        parse_mps_pinned_limits(text)
