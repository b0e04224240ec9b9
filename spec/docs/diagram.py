"""Dataflow diagrams of a body (the model or a block): steps as nodes, tensors as edges.

One ``Graph`` per body, built from its costs (``spec.counts``): a node per input and per
step (equation or block call), an edge from each tensor's producer to each step that reads
it, labelled with the tensor's name and shape. ``mermaid`` writes it for Markdown (GitHub
draws it); ``svg`` lays it out itself: nodes top to bottom in pipeline order, an edge between
neighbours straight down, a longer one (a residual, a mask) as an arc at the side, labelled
once where it leaves its producer.
"""

import re
from dataclasses import dataclass
from html import escape

from tspec.analysis.counts import BodyCost

NODE_WIDTH, NODE_HEIGHT, ROW = 360, 34, 74
LEFT, TOP, ARC = 40, 20, 46
CHAR_WIDTH = 6.6                 # of the 11 px monospace label font, for the arcs' width


@dataclass(frozen=True)
class Node:
    key: str
    label: str
    kind: str                    # input, equation, call


@dataclass(frozen=True)
class Edge:
    source: int                  # node indices
    target: int
    label: str                   # "Z_1: B T_x d_model"


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]


def graph(body: BodyCost, inputs: list[tuple[str, str]]) -> Graph:
    """``inputs``: the body's input tensors and their shape text, in order."""
    nodes, producer, edges = [], {}, []
    for name, _ in inputs:
        producer[name] = len(nodes)
        nodes.append(Node(name, name, "input"))
    shapes = dict(inputs)
    for step in body.steps:
        index = len(nodes)
        if step.callee:
            repeat = step.record.repeat
            times = f"{repeat} x " if repeat is not None else ""
            label = f"{step.output} = {times}{step.callee} ({step.record.instance})"
            kind = "call"
        else:
            label = f"{step.output} = {step.record.text}"
            kind = "equation"
        nodes.append(Node(step.output, label, kind))
        for name, shape in step.inputs:
            if name in producer:
                edges.append(Edge(producer[name], index,
                                  f"{name}: {shapes.get(name) or shape.text()}"))
        producer[step.output] = index
        shapes[step.output] = step.shape.text()
    return Graph(tuple(nodes), tuple(edges))


def mermaid(g: Graph) -> list[str]:
    """The graph as Mermaid flowchart lines (top to bottom)."""
    lines = ["flowchart TD"]
    for index, node in enumerate(g.nodes):
        text = _mermaid_text(node.label)
        shape = f'(["{text}"])' if node.kind == "input" else \
            f'[["{text}"]]' if node.kind == "call" else f'["{text}"]'
        lines.append(f"    n{index}{shape}")
    for edge in g.edges:
        lines.append(f'    n{edge.source} -->|"{_mermaid_text(edge.label)}"| n{edge.target}')
    return lines


_MERMAID_NAMED = {'"': "#quot;", "<": "#lt;", ">": "#gt;"}
_MERMAID_PLAIN = frozenset(" _:=()[],@+*-./")
_MERMAID_AS_IS = re.compile(r"[A-Za-z0-9 _:=()\[\],@+*\-./]*")     # ASCII of those kinds


def _mermaid_text(text: str) -> str:
    """A label inside Mermaid's quotes: letters, digits and the punctuation of equations and
    shapes as they are, every other character as Mermaid's own entity (#quot;, #60;), so that no
    label can end its quotes, its line or the Markdown fence, or hold a directive or HTML."""
    if _MERMAID_AS_IS.fullmatch(text):          # nearly every label: nothing to spell
        return text
    return "".join(c if c.isalnum() and c.isprintable() or c in _MERMAID_PLAIN
                   else _MERMAID_NAMED.get(c, f"#{ord(c)};") for c in text)


def svg(g: Graph, title: str) -> str:
    """The graph as a standalone SVG element: nodes in a column, edges labelled."""
    count = len(g.nodes)
    # arcs: each edge that skips rows goes right of the column, nested by length
    long_edges = sorted((e for e in g.edges if e.target - e.source > 1),
                        key=lambda e: e.target - e.source)
    lanes: list[list[tuple[int, int]]] = []
    lane_of = {}
    for edge in long_edges:
        for number, lane in enumerate(lanes):
            if all(edge.target <= a or edge.source >= b for a, b in lane):
                lane.append((edge.source, edge.target))
                lane_of[edge] = number
                break
        else:
            lanes.append([(edge.source, edge.target)])
            lane_of[edge] = len(lanes) - 1
    label_room = max((len(e.label) for e in g.edges), default=0) * CHAR_WIDTH
    width = int(LEFT + NODE_WIDTH + ARC * (len(lanes) + 1) + label_room + 20)
    height = TOP * 2 + ROW * (count - 1) + NODE_HEIGHT
    centre = LEFT + NODE_WIDTH / 2
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" '
             'font-family="monospace" font-size="11">'),
             f"<title>{escape(title)}</title>",
             ('<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
             'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
             '<path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>')]
    labelled: set[tuple[int, str]] = set()
    for edge in g.edges:
        y1 = TOP + edge.source * ROW + NODE_HEIGHT
        y2 = TOP + edge.target * ROW
        if edge.target - edge.source == 1:
            parts.append(f'<line x1="{centre:.0f}" y1="{y1}" x2="{centre:.0f}" y2="{y2}" '
                         'stroke="#555" marker-end="url(#arrow)"/>')
            parts.append(f'<text x="{centre + 8:.0f}" y="{(y1 + y2) / 2 + 4:.0f}" '
                         f'fill="#333">{escape(edge.label)}</text>')
            continue
        x_side = LEFT + NODE_WIDTH
        x_arc = x_side + ARC * (lane_of[edge] + 1)
        top, bottom = y1 - NODE_HEIGHT / 2, y2 + NODE_HEIGHT / 2
        parts.append(f'<path d="M {x_side} {top:.0f} H {x_arc} V {bottom:.0f} H {x_side}" '
                     'fill="none" stroke="#888" stroke-dasharray="4 3" '
                     'marker-end="url(#arrow)"/>')
        if (edge.source, edge.label) not in labelled:   # once per tensor, at its producer
            labelled.add((edge.source, edge.label))
            parts.append(f'<text x="{x_side + 6}" y="{top - 4:.0f}" '
                         f'fill="#333">{escape(edge.label)}</text>')
    for index, node in enumerate(g.nodes):
        y = TOP + index * ROW
        fill = {"input": "#e8f0fe", "call": "#fdf1dc", "equation": "#ffffff"}[node.kind]
        radius = 16 if node.kind == "input" else 3
        label = node.label if len(node.label) <= 52 else node.label[:51] + "\u2026"
        parts.append(f'<rect x="{LEFT}" y="{y}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" '
                     f'rx="{radius}" fill="{fill}" stroke="#333"/>')
        parts.append(f'<text x="{centre:.0f}" y="{y + NODE_HEIGHT / 2 + 4:.0f}" '
                     f'text-anchor="middle">{escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
