"""Plain-text tables for the bench report (fixed-width columns, one header line, a rule)."""

from __future__ import annotations


def ms(seconds: float | None, digits: int = 1) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def pct(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}%"


def mib(kib: int | None) -> str:
    return "-" if not kib else f"{kib / 1024:.1f}"


def kb(size: int | None) -> str:
    return "-" if size is None else f"{size / 1000:.1f}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or not denominator:
        return "-"
    return f"{numerator / denominator:.1f}x"


def render(title: str, header: list[str], rows: list[list[str]], note: str = "") -> str:
    """A titled table; the first column is left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [f"== {title}", line(header), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    if note:
        out += [f"   {text}" for text in note.strip().splitlines()]
    return "\n".join(out) + "\n"
