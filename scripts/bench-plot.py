#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plot and tabulate `qkvfuse bench` rows (JSON lines), standard library only.

    scripts/bench-plot.py ROWS.jsonl [--tag NAME] [--svg OUT.svg] [--markdown] [--target OP=PCT[@MIN_T] ...]

ROWS.jsonl holds the objects `qkvfuse bench --json` (or `--json-out FILE`)
writes, one per line; lines without an "op" key (a {"meta": {...}} line giving
the device, commit and command) are not rows, and the first meta line titles
the plot. A row needs op, preset, tokens, us, pct_of_copy and
speedup_vs_unfused; several rows of one (op, preset, tokens) are repeated
runs (their order is the run number). --tag NAME reads a device's raw-data
file that holds several runs instead: the rows are the lines {NAME: row},
and the meta line the one whose object has "tag": NAME.

--svg draws one panel per op: % of copy against the token count (evenly
spaced), a line per preset through the median of its runs and a dot per run;
--target draws the op's target as a dashed line over the token counts from
MIN_T on. --markdown prints the tables of BENCHMARKS.md: per op, presets
against token counts (fused us, % of copy, speed-up over unfused), or one
line per run when a case was run more than once. Numbers are printed with
the bench table's precision (us and GB/s 2 decimals, % of copy 0, speed-ups
2), so rows converted from that table come out as they were printed.
"""
import argparse
import json
import statistics
import sys
from xml.sax.saxutils import escape

OP_ORDER = ["split", "inplace", "cache", "dequant"]
OP_TITLE = {
    "split": "split (out of place)",
    "inplace": "in place",
    "cache": "int8 paged cache",
    "dequant": "int32 dequant + int8 cache",
}
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"]


def load(path, tag=None):
    rows, meta = [], None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit("%s:%d: not JSON: %s" % (path, n, e))
            is_meta = isinstance(obj.get("meta"), dict) and obj["meta"].get("tag") == tag
            if tag is not None and not is_meta:
                obj = obj.get(tag) if isinstance(obj.get(tag), dict) else {}
            if "op" in obj:
                for key in ("preset", "tokens", "us", "pct_of_copy", "speedup_vs_unfused"):
                    if key not in obj:
                        sys.exit("%s:%d: row without %r" % (path, n, key))
                rows.append(obj)
            elif meta is None and is_meta:
                meta = obj["meta"]
    if not rows:
        sys.exit("%s: no rows" % path)
    return rows, meta or {}


def ordered(values, order=None):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    if order:
        seen.sort(key=lambda v: order.index(v) if v in order else len(order))
    return seen


def groups(rows):
    """(op, preset, tokens) -> its rows in file order."""
    g = {}
    for r in rows:
        g.setdefault((r["op"], r["preset"], r["tokens"]), []).append(r)
    return g


def parse_targets(specs):
    t = {}
    for s in specs:
        try:
            op, rest = s.split("=", 1)
            pct, _, min_t = rest.partition("@")
            t[op] = (float(pct), int(min_t) if min_t else 0)
        except ValueError:
            sys.exit("--target needs OP=PCT or OP=PCT@MIN_T: %s" % s)
    return t


def svg(rows, meta, targets):
    ops = ordered((r["op"] for r in rows), OP_ORDER)
    presets = ordered(r["preset"] for r in rows)
    tokens = sorted({r["tokens"] for r in rows})
    g = groups(rows)
    cols = 2 if len(ops) > 1 else 1
    nrows = (len(ops) + cols - 1) // cols
    pw, ph = 450, 280  # panel
    ml, mr, mt, mb = 56, 16, 30, 40  # margins inside a panel
    top = 78  # title and legend
    width, height = cols * pw + 20, top + nrows * ph + 10
    ymax = max([r["pct_of_copy"] for r in rows] + [t[0] for t in targets.values()] + [100.0])
    ymax = 20.0 * int(ymax / 20.0 + 1)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (width, height), '<rect width="100%" height="100%" fill="white"/>']
    title = "qkvfuse bench: % of copy bandwidth by token count"
    sub = ", ".join(str(meta[k]) for k in ("device", "commit", "date") if meta.get(k))
    out.append('<text x="10" y="20" font-size="15">%s</text>' % escape(title))
    if sub:
        out.append('<text x="10" y="38" fill="#444">%s</text>' % escape(sub))
    x = 10
    for i, p in enumerate(presets):
        c = COLORS[i % len(COLORS)]
        out.append('<line x1="%d" x2="%d" y1="56" y2="56" stroke="%s" stroke-width="2"/>' % (x, x + 18, c))
        out.append('<circle cx="%d" cy="56" r="3" fill="%s"/>' % (x + 9, c))
        out.append('<text x="%d" y="60">%s</text>' % (x + 23, escape(p)))
        x += 36 + 8 * len(p)
    if targets:
        out.append('<line x1="%d" x2="%d" y1="56" y2="56" stroke="#000" stroke-dasharray="5,3"/>' % (x, x + 18))
        out.append('<text x="%d" y="60">target</text>' % (x + 23))

    for k, op in enumerate(ops):
        ox, oy = 10 + (k % cols) * pw, top + (k // cols) * ph
        x0, x1, y0, y1 = ox + ml, ox + pw - mr, oy + mt, oy + ph - mb
        n = len(tokens)

        def px(i):
            return x0 + (x1 - x0) * (i + 0.5) / n

        def py(v):
            return y1 - (y1 - y0) * v / ymax

        out.append('<text x="%d" y="%d" font-size="13">%s</text>' % (x0, oy + 18, escape(OP_TITLE.get(op, op))))
        step = 20 if ymax <= 160 else 50
        for v in range(0, int(ymax) + 1, step):
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>' %
                       (x0, x1, py(v), py(v), "#999" if v == 100 else "#e4e4e4"))
            out.append('<text x="%d" y="%.1f" text-anchor="end">%d%%</text>' % (x0 - 5, py(v) + 4, v))
        for i, t in enumerate(tokens):
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (px(i), y1 + 16, t))
        out.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#444">tokens (T)</text>' % ((x0 + x1) / 2, y1 + 32))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (x0, y0, x1 - x0, y1 - y0))
        if op in targets:
            pct, min_t = targets[op]
            idx = [i for i, t in enumerate(tokens) if t >= min_t]
            if idx:
                xa = x0 if idx[0] == 0 else (px(idx[0]) + px(idx[0] - 1)) / 2
                out.append('<line x1="%.1f" x2="%d" y1="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="5,3"/>' %
                           (xa, x1, py(pct), py(pct)))
                out.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%g%%</text>' % (x1 - 3, py(pct) + 13, pct))
        for j, p in enumerate(presets):
            c = COLORS[j % len(COLORS)]
            pts = []
            for i, t in enumerate(tokens):
                runs = g.get((op, p, t))
                if not runs:
                    continue
                vals = [r["pct_of_copy"] for r in runs]
                pts.append((px(i), py(statistics.median(vals))))
                for v in vals:
                    out.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (px(i), py(v), c))
            if len(pts) > 1:
                out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' %
                           (c, " ".join("%.1f,%.1f" % q for q in pts)))
            elif pts:
                out.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>' %
                           (pts[0][0] - 12, pts[0][0] + 12, pts[0][1], pts[0][1], c))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def cell(r):
    return "%.2f µs, %.0f%%, %.2fx" % (r["us"], r["pct_of_copy"], r["speedup_vs_unfused"])


def markdown(rows):
    ops = ordered((r["op"] for r in rows), OP_ORDER)
    presets = ordered(r["preset"] for r in rows)
    tokens = sorted({r["tokens"] for r in rows})
    g = groups(rows)
    repeated = any(len(v) > 1 for v in g.values())
    out = []
    if repeated:
        ref = any("reference_us" in r for r in rows)
        head = ["op", "preset", "T", "run", "fused µs", "GB/s", "copy GB/s", "% of copy", "unfused µs", "x unfused"]
        if ref:
            head += ["reference µs", "x reference"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for op in ops:
            for p in presets:
                for t in tokens:
                    for n, r in enumerate(g.get((op, p, t), []), 1):
                        f = [op, p, str(t), str(r.get("run", n)), "%.2f" % r["us"], "%.2f" % r.get("gbps", float("nan")),
                             "%.2f" % r.get("copy_gbps", float("nan")), "%.0f%%" % r["pct_of_copy"],
                             "%.2f" % r.get("unfused_us", float("nan")), "%.2fx" % r["speedup_vs_unfused"]]
                        if ref:
                            f += ["%.2f" % r.get("reference_us", float("nan")),
                                  "%.2fx" % r.get("speedup_vs_reference", float("nan"))]
                        out.append("| " + " | ".join(f) + " |")
        return "\n".join(out) + "\n"
    for op in ops:
        out += ["", "**%s** (fused µs, %% of copy, speed-up over unfused)" % OP_TITLE.get(op, op), ""]
        out.append("| preset | " + " | ".join("T = %d" % t for t in tokens) + " |")
        out.append("|---|" + "---|" * len(tokens))
        for p in presets:
            out.append("| %s | " % p + " | ".join(cell(g[(op, p, t)][0]) if (op, p, t) in g else "not run"
                                                for t in tokens) + " |")
    return "\n".join(out[1:]) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", help="qkvfuse bench JSON lines")
    ap.add_argument("--tag", help="the rows are the lines {TAG: row} (a raw-data file of several runs)")
    ap.add_argument("--svg", help="write the plot here")
    ap.add_argument("--markdown", action="store_true", help="print the tables (Markdown) on stdout")
    ap.add_argument("--target", action="append", default=[], metavar="OP=PCT[@MIN_T]",
                    help="an op's target in %% of copy, from token count MIN_T on")
    a = ap.parse_args()
    targets = parse_targets(a.target)
    rows, meta = load(a.rows, a.tag)
    if a.svg:
        with open(a.svg, "w", encoding="utf-8") as f:
            f.write(svg(rows, meta, targets))
    if a.markdown:
        sys.stdout.write(markdown(rows))
    if not a.svg and not a.markdown:
        ap.error("nothing to do: give --svg and/or --markdown")


if __name__ == "__main__":
    main()
