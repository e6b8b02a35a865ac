"""Figures the chapters share: attention heatmaps, per-head grids, curves,
and tables of results.

Conventions: an attention matrix ``A`` is ``(N_q, N_k)`` with queries as rows
(the token that takes) and keys as columns (the token that gives), as in
``course_lib.attention``. Every function returns the matplotlib ``Figure``
(or draws into the ``ax`` it is given) and never calls ``plt.show``.
:func:`table` returns a :class:`Table`, which a notebook shows as an HTML
table that fits the book's column (and a terminal as aligned text).
"""

import html
import re

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["plot_attention", "plot_heads", "plot_matrix", "plot_curves",
           "table", "Table"]


def _as_array(x):
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def plot_attention(A, queries=None, keys=None, *, title=None, ax=None,
                   annotate=None, vmax=None, cmap="viridis"):
    """Heatmap of one ``(N_q, N_k)`` attention matrix.

    ``queries`` and ``keys`` label the rows and columns (token strings or
    indices). Weights are written in the cells when the matrix is small
    (``annotate=None`` decides by size).
    """
    A = _as_array(A)
    if A.ndim != 2:
        raise ValueError(
            f"expected one (N_q, N_k) matrix, got shape {A.shape}"
        )
    n_q, n_k = A.shape
    if ax is None:
        size = (1.0 + 0.45 * n_k, 0.8 + 0.45 * n_q)
        fig, ax = plt.subplots(figsize=(max(size[0], 3), max(size[1], 2.5)))
    else:
        fig = ax.figure
    image = ax.imshow(A, cmap=cmap, vmin=0.0, vmax=vmax or max(A.max(), 1e-9))
    ax.set_xticks(range(n_k), keys if keys is not None else range(n_k))
    ax.set_yticks(range(n_q), queries if queries is not None else range(n_q))
    ax.set_xlabel("key (token attended to)")
    ax.set_ylabel("query (token attending)")
    if keys is not None and max(len(str(k)) for k in keys) > 2:
        ax.tick_params(axis="x", labelrotation=45)
    if annotate is None:
        annotate = n_q * n_k <= 64
    if annotate:
        threshold = 0.6 * A.max()
        for i in range(n_q):
            for j in range(n_k):
                ax.text(j, i, f"{A[i, j]:.2f}", ha="center", va="center",
                        fontsize=8,
                        color="black" if A[i, j] > threshold else "white")
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return fig


def plot_heads(A, tokens=None, *, title=None, max_cols=4):
    """Grid of per-head attention maps from ``A`` of shape ``(H, N, N)``."""
    A = _as_array(A)
    if A.ndim != 3:
        raise ValueError(f"expected (H, N_q, N_k) weights, got {A.shape}")
    H = A.shape[0]
    cols = min(H, max_cols)
    rows = -(-H // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows),
                             squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.axis("off")
            continue
        ax.imshow(A[h], cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(f"head {h}")
        labels = tokens if tokens is not None else range(A.shape[-1])
        ax.set_xticks(range(A.shape[-1]), labels, rotation=45, fontsize=7)
        ax.set_yticks(range(A.shape[-2]), labels, fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_matrix(M, *, title=None, ax=None, xlabel=None, ylabel=None,
                cmap="RdBu_r", symmetric=True):
    """Heatmap of any matrix (encodings, scores), centred on 0 by default."""
    M = _as_array(M)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
    else:
        fig = ax.figure
    limit = np.abs(M).max() if symmetric else None
    image = ax.imshow(M, cmap=cmap, aspect="auto",
                      vmin=-limit if symmetric else None, vmax=limit)
    ax.set_xlabel(xlabel or "")
    ax.set_ylabel(ylabel or "")
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax)
    return fig


def plot_curves(curves, *, xlabel, ylabel, title=None, logx=False,
                logy=False, ax=None):
    """Line plot of ``{label: (xs, ys)}``; log axes for scaling laws."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 4))
    else:
        fig = ax.figure
    for label, (xs, ys) in curves.items():
        ax.plot(_as_array(xs), _as_array(ys), marker="o", label=label)
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return fig


_NUMBER = re.compile(r"^[-+−]?[\d,.]+(e[-+]?\d+)?\s*%?$|^[-+−]?inf$")


def _cell(value):
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class Table:
    """Rows of results with a header, an optional ``caption`` above and
    ``notes`` (lines) below. In a notebook it is one HTML output: numbers
    right-aligned, and only the table scrolls sideways if it must. Every
    text is escaped. ``str(table)`` is the same as aligned text."""

    def __init__(self, header, rows, *, caption=None, notes=()):
        self.header = [_cell(h) for h in header]
        self.rows = [[_cell(v) for v in row] for row in rows]
        for k, row in enumerate(self.rows):
            if len(row) != len(self.header):
                raise ValueError(
                    f"row {k} has {len(row)} cells; expected "
                    f"{len(self.header)}, one per header column")
        self.caption = caption
        self.notes = [str(n) for n in notes]

    def _numeric(self, j):
        column = [row[j] for row in self.rows]
        return bool(column) and all(_NUMBER.match(v.strip())
                                    for v in column if v.strip())

    def _repr_html_(self):
        align = ["right" if self._numeric(j) else "left"
                 for j in range(len(self.header))]
        esc = html.escape

        def row(cells, tag):
            return "<tr>" + "".join(
                f'<{tag} style="text-align: {a}; padding: 0.2em 0.7em">'
                f"{esc(c)}</{tag}>"
                for c, a in zip(cells, align, strict=True)) + "</tr>"

        parts = ['<div class="course-table">']
        if self.caption:
            parts.append(f"<p>{esc(self.caption)}</p>")
        parts.append('<div style="overflow-x: auto"><table>')
        parts.append("<thead>" + row(self.header, "th") + "</thead>")
        parts.append("<tbody>" + "".join(row(r, "td") for r in self.rows)
                     + "</tbody></table></div>")
        if self.notes:  # one paragraph, a line each
            parts.append("<p>" + "<br>".join(esc(n) for n in self.notes)
                         + "</p>")
        parts.append("</div>")
        return "".join(parts)

    def __str__(self):
        widths = [max(len(c) for c in column)
                  for column in zip(self.header, *self.rows, strict=True)]
        lines = [self.caption] if self.caption else []
        for cells in (self.header, *self.rows):
            lines.append("  ".join(
                c.rjust(w) if self._numeric(j) else c.ljust(w)
                for j, (c, w) in enumerate(zip(cells, widths, strict=True)))
                .rstrip())
        return "\n".join(lines + self.notes)

    __repr__ = __str__


def table(header, rows, *, caption=None, notes=()):
    """A :class:`Table` of ``rows`` (sequences of cells, one per column of
    ``header``): strings as they are, ints with thousands separators,
    floats to 4 significant digits. Make it a cell's last expression (or
    ``display`` it) to show it."""
    return Table(header, rows, caption=caption, notes=notes)
