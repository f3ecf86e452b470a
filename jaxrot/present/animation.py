"""Animated GIFs of tumbling bodies (matplotlib + Pillow; no external video tools).

``animate_bodies(panels, path)`` draws one 3-D panel per entry: the body as a shaded solid built
from boxes (a box, a T-handle, a pole) or the particle book's points and springs, moving with the
attitudes given, and its angular momentum vector (red arrow). Several methods side by side make a
comparison. Never imported by the core.
"""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.animation import FuncAnimation, PillowWriter  # noqa: E402
from mpl_toolkits.mplot3d.art3d import Poly3DCollection  # noqa: E402

_FACES = [(0, 1, 3, 2), (4, 5, 7, 6), (0, 1, 5, 4), (2, 3, 7, 6), (0, 2, 6, 4), (1, 3, 7, 5)]


def box(center, half) -> np.ndarray:
    """The 8 corners of an axis-aligned box (body frame)."""
    c, h = np.asarray(center, float), np.asarray(half, float)
    return np.array([c + h * [sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])


# body-frame shapes as lists of boxes (corners): drawn only, the dynamics use the problem's J
SHAPES = {
    "box": [box((0, 0, 0), (0.1, 0.5, 0.75))],  # a 0.2 x 1.0 x 1.5 book
    # T-handle: the stem along the intermediate (y) axis, the crossbar along z (for display)
    "t_handle": [box((0, 0.1, 0), (0.07, 0.6, 0.07)), box((0, -0.5, 0), (0.07, 0.07, 0.7))],
    "pole": [box((0, 0, 0), (0.05, 0.05, 1.0))],
}


def shape_for(problem_name: str) -> str:
    return {"t_handle": "t_handle", "dancing_pole": "pole"}.get(problem_name, "box")


def animate_bodies(panels: list[dict], path, *, fps: int = 20, dpi: int = 90, size: float = 3.2,
                   title: str = "") -> pathlib.Path:
    """Write an animated GIF.

    Each panel: ``{"title": str, "R": (n, 3, 3) attitudes, "L": (3,) or (n, 3) world momentum,
    "shape": "box" | "t_handle" | "pole"}`` or, for the particle book, ``{"title", "X": (n, 8, 3),
    "L", "springs": (m, 2) index pairs}``. All panels must have the same number of frames.
    """
    path = pathlib.Path(path)
    if path.suffix.lower() != ".gif":
        raise ValueError(f"the animation is written as a GIF: give a path ending in .gif, got {path}")
    if not panels:
        raise ValueError("nothing to animate: no panels")
    n = len(panels[0]["R"] if "R" in panels[0] else panels[0]["X"])
    if any(len(p["R"] if "R" in p else p["X"]) != n for p in panels):
        raise ValueError("all panels need the same number of frames")
    head = 0.45 if title else 0.2  # inches above the panels for the figure's title and the panels' titles
    fig = plt.figure(figsize=(size * len(panels), size + head), dpi=dpi)
    top = size / (size + head)
    # each 3-D axes fills its panel edge to edge (add_subplot leaves wide empty margins round a 3-D box)
    axes = [fig.add_axes((i / len(panels), 0.0, 1.0 / len(panels), top), projection="3d")
            for i in range(len(panels))]
    if title:
        fig.suptitle(title, fontsize=9, y=0.99)
    reach = 1.1

    def draw(k):
        for ax, p in zip(axes, panels):
            ax.cla()
            ax.set_xlim(-reach, reach)
            ax.set_ylim(-reach, reach)
            ax.set_zlim(-reach, reach)
            ax.set_box_aspect((1, 1, 1), zoom=1.35)  # the body, not the empty cube round it, fills the panel
            ax.set_axis_off()
            ax.set_title(p.get("title", ""), fontsize=8, y=0.98)
            if "R" in p:
                R = np.asarray(p["R"][k])
                for corners in SHAPES[p.get("shape", "box")]:
                    w = corners @ R.T
                    ax.add_collection3d(Poly3DCollection([w[list(f)] for f in _FACES], facecolor="#7fa7d9",
                                                         edgecolor="#1f3f66", linewidths=0.4, alpha=0.9))
            else:
                X = np.asarray(p["X"][k])
                X = X - X.mean(0)
                scale = 0.75 / max(np.abs(np.asarray(p["X"][0]) - np.asarray(p["X"][0]).mean(0)).max(), 1e-12)
                for i, j in p["springs"]:
                    ax.plot(*(scale * X[[i, j]]).T, color="0.5", lw=0.5)
                ax.scatter(*(scale * X).T, color="#1f3f66", s=10)
            L = np.asarray(p["L"])
            L = L[k] if L.ndim == 2 else L
            L = 0.9 * L / max(np.linalg.norm(L), 1e-300)
            ax.quiver(0, 0, 0, *L, color="red", lw=1.5, arrow_length_ratio=0.15)
        return []

    anim = FuncAnimation(fig, draw, frames=n, interval=1000 / fps, blit=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    anim.save(str(path), writer=PillowWriter(fps=fps))
    plt.close(fig)
    return path
