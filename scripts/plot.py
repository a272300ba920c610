#!/usr/bin/env python3
"""plot.py -- bandwidth against size, ours against bare libfabric, as an SVG.

    scripts/plot.py OUT.svg RUN.json[=LABEL] [RUN.json[=LABEL] ...]

Each RUN.json is the output of `maestro bench pool --json` or `maestro bench fabric
--json`; every file gives its lines (ours solid, bare fi_read dashed, Open MPI dotted when
the run had --mpi) in one colour, labelled with LABEL or its provider and progress mode. Sizes go on a log2 axis, GB/s on a linear one. Standard library only: no plotting
package to install.
"""

import json
import math
import sys

WIDTH, HEIGHT = 760, 430
LEFT, RIGHT, TOP, BOTTOM = 70, 220, 40, 60
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def series(arg):
    """[(label, [(size, gbps)], style)] of one benchmark file (`PATH` or `PATH=LABEL`)."""
    path, _, label = arg.partition("=")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    rows = doc["rows"]
    what = "demand" if "p50_us" in rows[0] else "fabric layer"
    name = label or f'{doc["provider"]} {doc.get("progress", "")}'.strip()
    ours_key = "gbps" if what == "demand" else "ours_gbps"
    out = [(f"{what}, {name}", [(r["size"], r[ours_key]) for r in rows], "solid")]
    for key, title, style in (("raw_gbps", "bare fi_read", "dashed"),
                              ("mpi_gbps", "Open MPI send/recv", "dotted")):
        pts = [(r["size"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            out.append((f"{title}, {name}", pts, style))
    return out


def size_label(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}"


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    out, files = argv[1], argv[2:]
    # (file index, label, points, style)
    lines = [(i, *s) for i, f in enumerate(files) for s in series(f)]
    sizes = sorted({size for _, _, pts, _ in lines for size, _ in pts})
    step = max(1, math.ceil(max(g for _, _, pts, _ in lines for _, g in pts) / 5))
    top = step * 5
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])
    span = (hi - lo) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(size):
        return LEFT + (math.log2(size) - lo) / span * plot_w

    def y(gbps):
        return TOP + plot_h - gbps / top * plot_h

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="14">Bandwidth against size (GB/s, 1e9 B/s)</text>',
    ]
    for i in range(6):
        g = step * i
        svg.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(g):.1f}" y2="{y(g):.1f}" '
                   'stroke="#ddd"/>')
        svg.append(f'<text x="{LEFT - 8}" y="{y(g) + 4:.1f}" text-anchor="end">{g}</text>')
    for s in sizes:
        svg.append(f'<text x="{x(s):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">'
                   f'{size_label(s)}</text>')
    svg.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 15}" text-anchor="middle">'
               'size (bytes)</text>')
    for k, (file, label, pts, style) in enumerate(lines):
        # One colour per file (per line when there is one file); the style tells ours,
        # bare libfabric and MPI apart.
        colour = COLOURS[(file if len(files) > 1 else k) % len(COLOURS)]
        path = " ".join(f"{x(s):.1f},{y(g):.1f}" for s, g in pts)
        dash = {"solid": "", "dashed": ' stroke-dasharray="6,4"',
                "dotted": ' stroke-dasharray="2,3"'}[style]
        svg.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                   f'stroke-width="2"{dash}/>')
        for s, g in pts:
            svg.append(f'<circle cx="{x(s):.1f}" cy="{y(g):.1f}" r="3" fill="{colour}"/>')
        ly = TOP + 10 + k * 20
        lx = LEFT + plot_w + 15
        svg.append(f'<line x1="{lx}" x2="{lx + 25}" y1="{ly}" y2="{ly}" stroke="{colour}" '
                   f'stroke-width="2"{dash}/>')
        svg.append(f'<text x="{lx + 32}" y="{ly + 4}">{label}</text>')
    svg.append("</svg>")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main(sys.argv)
