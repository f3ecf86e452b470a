"""Where does Newton converge? One implicit-midpoint step of a T-handle over a grid of angular
momenta (the Roblox article's map), against the Kantorovich disc where convergence is guaranteed.

Run: python examples/convergence_map.py [FOLDER]   (writes FOLDER/convergence_map.png; default the current folder)
"""

import jax

jax.config.update("jax_enable_x64", True)
import pathlib  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

from jaxrot import maps  # noqa: E402
from jaxrot.integrators import KANTOROVICH_X  # noqa: E402


def main(n: int = 41, png: str | None = "convergence_map.png") -> dict:
    J = np.array([2.5, 1.4, 1.3])
    x = np.linspace(-15, 15, n)
    # rows = L_y, columns = L_x: the layout imshow draws (origin lower)
    ells = np.stack([*np.meshgrid(x, x, indexing="xy"), np.zeros((n, n))], axis=-1)  # dt L with dt = 1
    iters = maps.convergence_map("midpoint", J, ells, solver="newton")
    radius = np.linalg.norm(ells, axis=-1)
    disc = KANTOROVICH_X * J.min()
    print(f"Newton converged at {100 * (iters >= 0).mean():.1f}% of the grid; inside the Kantorovich disc "
          f"|L| <= {disc:.3f}: {100 * (iters[radius <= disc] >= 0).mean():.0f}%")
    if png:
        from jaxrot.present import output
        from jaxrot.present.plotting import convergence_maps_figure

        fig = convergence_maps_figure(x, {"implicit midpoint, Newton": iters}, max_iters=10, disc_radius=disc)
        with output.atomic(png) as tmp:
            fig.savefig(tmp, format="png")
        print(f"wrote {png}")
    return {"converged": float((iters >= 0).mean()), "inside_disc": float((iters[radius <= disc] >= 0).mean())}


if __name__ == "__main__":
    folder = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    folder.mkdir(parents=True, exist_ok=True)
    main(png=str(folder / "convergence_map.png"))
