"""The scaling plot as SVG, written by hand (no plotting library): throughput against nodes, measured and
linear, the target's line, on linear axes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from multinode.client.scaling import ScalingReport

W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 400, 70, 20, 40, 50


def scaling_svg(report: ScalingReport, title: str) -> str:
    results = report.results
    base = results[0]
    max_nodes = max(r.nodes for r in results)
    ideal = [(r.nodes, base.throughput * r.nodes / base.nodes) for r in results]
    top = max([t for _, t in ideal] + [r.throughput for r in results] + [1e-9]) * 1.1

    def x(nodes: float) -> float:
        return LEFT + (W - LEFT - RIGHT) * nodes / max_nodes

    def y(value: float) -> float:
        return H - BOTTOM - (H - TOP - BOTTOM) * value / top

    def path(points: Sequence[tuple[float, float]]) -> str:
        return " ".join(f"{'M' if i == 0 else 'L'}{x(n):.1f},{y(t):.1f}" for i, (n, t) in enumerate(points))

    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
              'font-family="sans-serif" font-size="12">'),
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
             f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="black"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="black"/>',
             f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 10}" text-anchor="middle">nodes</text>',
             (f'<text x="15" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" '
              f'transform="rotate(-90 15 {(TOP + H - BOTTOM) / 2})">samples/s</text>')]
    for r in results:
        parts.append(f'<text x="{x(r.nodes):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{r.nodes}</text>')
    for i in range(5):
        value = top * i / 4
        parts.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.0f}</text>')
    target = [(n, t * report.target) for n, t in ideal]
    parts += [f'<path d="{path(ideal)}" fill="none" stroke="#999" stroke-dasharray="6 4"><title>linear</title></path>',
              (f'<path d="{path(target)}" fill="none" stroke="#d62728" stroke-dasharray="2 3">'
               f'<title>target {report.target:.0%} of linear</title></path>'),
              (f'<path d="{path([(r.nodes, r.throughput) for r in results])}" fill="none" stroke="#1f77b4" '
               'stroke-width="2"><title>measured</title></path>')]
    for r in results:
        parts.append(f'<circle cx="{x(r.nodes):.1f}" cy="{y(r.throughput):.1f}" r="4" fill="#1f77b4">'
                     f'<title>{r.nodes} nodes: {r.throughput:.1f} samples/s, {r.efficiency:.0%} of linear</title>'
                     '</circle>')
    legend = [("#1f77b4", "measured", ""), ("#999", "linear", "6 4"),
              ("#d62728", f"target {report.target:.0%}", "2 3")]
    for i, (colour, label, dash) in enumerate(legend):
        ly = TOP + 10 + 16 * i
        parts.append(f'<line x1="{LEFT + 10}" y1="{ly}" x2="{LEFT + 40}" y2="{ly}" stroke="{colour}" '
                     f'stroke-dasharray="{dash or "none"}" stroke-width="2"/>')
        parts.append(f'<text x="{LEFT + 46}" y="{ly + 4}">{escape(label)}</text>')
    verdict = "PASS" if report.passed else "FAIL"
    parts.append(f'<text x="{W - RIGHT}" y="{TOP + 14}" text-anchor="end" font-weight="bold">{verdict}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
