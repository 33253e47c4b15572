"""Aligned text tables for the operator commands (``describe``, ``cluster show``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Collection[int] = ()) -> list[str]:
    """Rows as aligned columns two spaces apart, indented by two; the last column is free-width.

    Args:
        right: indexes of the columns aligned right (numbers).
    """
    if not rows:
        return ["  -"]
    cells = [[str(cell) for cell in row] for row in (headers, *rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers) - 1)]

    def line(row: list[str]) -> str:
        fixed = [
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row[:-1], widths, strict=True))
        ]
        return "  " + "  ".join([*fixed, row[-1]]).rstrip()

    return [line(row) for row in cells]


def clip(line: str, width: int) -> str:
    """``line`` cut to ``width`` characters (an ellipsis marks the cut); never below 20."""
    return line if len(line) <= width else line[: max(width - 1, 20)] + "…"
