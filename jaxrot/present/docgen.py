"""The method pages of ``docs/methods/``, generated from the code so they cannot drift from it.

Each page is a family's introduction and papers (below), its modules' docstrings (the update
equations live there, next to the code) and a table of its registered methods read from the
registry (order, exact invariants, explicit/implicit, torque evaluations per step, torque support).
Regenerate with ``python -m jaxrot.present.docgen`` (a test fails when a page is stale).
"""

from __future__ import annotations

import importlib
import pathlib
import re
import sys

#: family -> (title, modules, introduction, papers)
FAMILIES: dict[str, tuple[str, list[str], str, list[str]]] = {
    "buss": (
        "Buss's 1st–4th order updates and energy preservation",
        ["buss", "world_update", "energy_projection"],
        "Explicit world-frame updates `R ← exp(h ŵ) R` whose net rate `w̄` is a truncated series in the "
        "derivatives of `w = I_w⁻¹ L`; the augmented 2nd order adds one cross product and the true 3rd "
        "and 4th orders Lie-bracket corrections. Cost: one torque evaluation plus Taylor-mode derivatives "
        "of order p − 1 per step; the energy-projected (`*_ep`) variants add a small 2×2 solve. "
        "Without torque the world momentum is exact; with EP also the energy.",
        ["S. R. Buss, \"Accurate and efficient simulation of rigid-body rotations\", J. Comput. Phys. 164 "
         "(2000) 377–406.",
         "S. R. Buss, talk \"Accurate simulation of rigid body rotation and extensions to Lie groups\" (2011): "
         "energy preservation via the Poinsot ellipsoid, the 1×4×18 prism table.",
         "A. Chern, CSE 291 lecture notes \"Rigid body dynamics\" (2023): the simple and augmented updates."],
    ),
    "lie-taylor": (
        "Lie-group Taylor (Magnus / dexp⁻¹) methods, orders 1–5",
        ["lie_taylor"],
        "The exponent `Z(h)` of `R(h) = exp(h Z(h)) R(0)` as a Taylor series whose coefficients are "
        "nested brackets of the derivatives of `W = ŵ`; order K keeps K terms. Cost: one torque "
        "evaluation plus Taylor-mode derivatives of order K − 1 per step. Without torque the world "
        "momentum is exact.",
        ["S. R. Buss, talk (2011), part II: Lie-group Taylor series up to 5th order.",
         "A. Iserles, H. Munthe-Kaas, S. Nørsett, A. Zanna, \"Lie-group methods\", Acta Numerica 9 (2000) "
         "215–365 (Magnus and dexp⁻¹ series)."],
    ),
    "splitting": (
        "Symplectic splittings of the free rigid body",
        ["splitting"],
        "The kinetic energy split into its three axis terms, each flowed exactly (a rotation about a body "
        "axis), composed symmetrically (order 2) and by Yoshida's triple jump (order 4). Explicit, no "
        "solve; torque-free only. Exact world momentum and |Π|; energy bounded (exact with EP). The "
        "ordering of the axes matters by large factors (see the README's Buss table).",
        ["R. I. McLachlan, S. Reich, splitting methods for the free rigid body (as compared by Buss, 2011).",
         "H. Yoshida, \"Construction of higher order symplectic integrators\", Phys. Lett. A 150 (1990) 262–268."],
    ),
    "midpoint-lie": (
        "Krysl's midpoint-Lie family",
        ["midpoint_lie"],
        "Body-frame updates `R ← R exp(Ψ̂)` from the core implicit equation `Ψ = τ J⁻¹ exp(−Ψ̂/2) P`, "
        "solved by Newton with a `jax.jacfwd` Jacobian (gradients by the implicit-function theorem); the "
        "variants differ in where the torque impulse enters. Cost: Newton iterations (reported per step in `StepStats.newton_iters`) of a "
        "3×3 system per step and 0–1 torque evaluations per step (LIEMID[I]: one per iteration).",
        ["P. Krysl, \"Explicit momentum-conserving integrator for dynamics of rigid bodies approximating the "
         "midpoint Lie algorithm\", Int. J. Numer. Meth. Engng 63 (2005) 2171–2193."],
    ),
    "exponential": (
        "Implicit midpoint and trapezoidal rules in exponential coordinates",
        ["exponential", "kantorovich"],
        "One implicit equation per step for the rotation vector `v` of the step, solved by Newton with a "
        "`jax.jacfwd` Jacobian; torque-free. The midpoint rule is Krysl's LIEMID, the object-space "
        "trapezoid is Simo–Wong (energy exact). Kantorovich-safe sub-stepping makes Newton's convergence "
        "guaranteed at any step size. Cost: Newton iterations of a 3×3 system (plus sub-steps).",
        ["M. Mizerski, \"Motion of spinning bodies\", Roblox technology blog (2020)."],
    ),
    "comparison": (
        "Energy-momentum and variational comparison methods (AKW, Simo–Wong, NMB, DMV)",
        ["akw", "simo_wong", "nmb", "dmv"],
        "The methods Krysl and Buss compare against. AKW and implicit Simo–Wong are energy-momentum "
        "conserving midpoint rules (Newton on `Ω_{n+1}`); DMV is the discrete Moser–Veselov map "
        "(torque-free, Newton on a unit quaternion); NMB is the explicit Newmark scheme in the body frame.",
        ["N. Austin, P. S. Krishnaprasad, L.-S. Wang, \"Almost Poisson integration of rigid body systems\", "
         "J. Comput. Phys. 107 (1993) 105–117 (as given in Krysl's appendix).",
         "J. C. Simo, K. K. Wong, \"Unconditionally stable algorithms for rigid body dynamics that exactly "
         "preserve energy and momentum\", Int. J. Numer. Meth. Engng 31 (1991) 19–52.",
         "P. Krysl, L. Endres, \"Explicit Newmark/Verlet algorithm for time integration of the rotational "
         "dynamics of rigid bodies\", Int. J. Numer. Meth. Engng 62 (2005) 2154–2177.",
         "J. Moser, A. P. Veselov, \"Discrete versions of some classical integrable systems and factorization "
         "of matrix polynomials\", Commun. Math. Phys. 139 (1991) 217–243."],
    ),
    "high-order": (
        "High order: the exact free flow, Hairer–Vilmart's DMV, compositions, RKMK",
        ["exact_flow", "near_integrable", "dmv", "compose", "rkmk", "rkmk8"],
        "For accuracy per second: the exact torque-free flow (`exact_free`; `jaxrot.exact.free_flow`) and "
        "the Strang splitting around it for torques (`exact_split`), the discrete Moser–Veselov map with "
        "Hairer–Vilmart's modified moments of inertia (orders 4–10, every invariant of DMV kept), "
        "`Compose(base, scheme)` raising any symmetric second-order method to order 4, 6 or 8, and the "
        "Runge–Kutta–Munthe-Kaas methods for any torque: RKMK4 (classical RK4) and RKMK8 (Dormand–Prince 8 "
        "with the exact inverse differential of the exponential). Registered compositions: `<base>_tj4` "
        "(triple jump), `<base>_kl6`, `<base>_kl8` (Kahan–Li) for `liemid_ea` and `exact_split`. For a "
        "torque small beside the free rotation, Laskar–Robutel's SABA_n/SBAB_n (`saba2`–`saba4`, "
        "`sbab2`, `sbab3`) place the kicks at Gauss or Lobatto nodes between exact free flows: order 2n "
        "in the terms linear in the torque, 2 in general; Blanes et al.'s ABA(8,6,4) and ABA(10,6,4) "
        "(`aba864`, `aba1064`), palindromic drifts and kicks with some drifts backwards: order 8 or 10 in "
        "the linear terms, 6 in the quadratic ones and 4 in general.",
        ["E. Celledoni, F. Fassò, N. Säfström, A. Zanna, \"The exact computation of the free rigid body motion "
         "and its use in splitting methods\", SIAM J. Sci. Comput. 30 (2008) 2084–2112.",
         "J. Laskar, P. Robutel, \"High order symplectic integrators for perturbed Hamiltonian systems\", "
         "Celest. Mech. Dyn. Astron. 80 (2001) 39–62.",
         "E. Hairer, G. Vilmart, \"Preprocessed discrete Moser–Veselov algorithm for the full dynamics of a "
         "rigid body\", J. Phys. A 39 (2006) 13225–13235 (coefficients from the authors' DMV10.f).",
         "H. Yoshida, Phys. Lett. A 150 (1990) 262; M. Suzuki, Phys. Lett. A 146 (1990) 319; "
         "W. Kahan, R.-C. Li, Math. Comp. 66 (1997) 1089; R. I. McLachlan, SIAM J. Sci. Comput. 16 (1995) 151; "
         "as tabulated in Hairer, Lubich, Wanner, Geometric Numerical Integration (2006), section V.3.",
         "H. Munthe-Kaas, \"Runge–Kutta methods on Lie groups\", BIT 38 (1998) 92–111.",
         "H. Munthe-Kaas, \"High order Runge–Kutta methods on manifolds\", Appl. Numer. Math. 29 (1999) 115–127; "
         "J. R. Dormand, P. J. Prince, J. Comput. Appl. Math. 6 (1980) 19–26 and Hairer, Nørsett, Wanner, Solving "
         "ODEs I (1993), II.10 (DOP853's coefficients).",
         "B. C. Carlson, \"Numerical computation of real or complex elliptic integrals\", Numer. Algorithms 10 "
         "(1995) 13–26."],
    ),
    "baseline": (
        "Classical baselines: Euler, quaternions, RK4, Adams–Bashforth–Moulton",
        ["euler", "rk4", "abm", "reorthonormalize"],
        "The non-geometric methods Buss and the Groningen slides compare against, with the "
        "re-orthonormalisation they need (SVD nearest rotation, quaternion normalisation). Cost: 1 (Euler), "
        "4 (RK4) or 2 (ABM) vector-field evaluations per step. The Groningen particle model (8 masses on "
        "springs) is in `jaxrot.physics.particles`.",
        ["S. R. Buss (2000, 2011): RK4 and Adams–Bashforth–Moulton comparisons.",
         "I. Postma, E. Nerbonne, \"Simulation of the unstable rotation of a cuboid\", University of Groningen "
         "(2011): the Euler + SVD and quaternion updates and the spring book."],
    ),
}

PAGE = {family: family.replace("-", "_") + ".md" for family in FAMILIES}


def _markdown(doc: str) -> str:
    """A module docstring (reST-flavoured) as GitHub markdown: ``::`` literal markers dropped,
    simple ``====`` tables and indented formula blocks fenced (so ``===`` never becomes a heading)."""
    out, lines, i = [], doc.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^=+( +=+)+\s*$", line):  # a reST simple table (no blank lines inside): fence it
            j = i + 1
            while j < len(lines) and lines[j].strip():
                j += 1
            out += ["```text", *lines[i:j], "```"]
            i = j
            continue
        if line.startswith("    ") and (not out or not out[-1].strip()):  # an indented block
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while j > i and not lines[j - 1].strip():
                j -= 1
            out += ["```text", *[ln[4:] for ln in lines[i:j]], "```"]
            i = j
            continue
        out.append(line[:-1] if line.endswith("::") else line)
        i += 1
    return "\n".join(out)


def render(family: str) -> str:
    """The markdown page of one family."""
    from ..integrators import REGISTRY

    title, modules, intro, papers = FAMILIES[family]
    rows = [i for i in REGISTRY.values() if i.family == family]
    parts = [f"# {title}", "", intro, "", "## Methods", "",
             "| method | order | exact without torque | kind | torque evaluations per step | torque | notes |",
             "|---|---|---|---|---|---|---|"]
    for i in rows:
        cells = [f"`{i.name}`", str(i.order), ", ".join(i.conserves) or "–", "implicit" if i.implicit else "explicit",
                 i.torque_evals, "yes" if i.torque else "free only", i.description or "–"]
        parts.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    parts += ["", "Exact: `L` world angular momentum, `|Pi|` body momentum norm, `E` kinetic energy. Orders are "
              "checked by the generic tests (observed log–log slope) and conservation to round-off.", ""]
    for name in modules:
        mod = importlib.import_module(f"jaxrot.integrators.{name}")
        parts += [f"## `jaxrot.integrators.{name}`", "", _markdown(mod.__doc__.strip()), ""]
    parts += ["## Papers", "", *[f"- {p}" for p in papers], ""]
    return "\n".join(parts)


def render_problems() -> str:
    """The page of named problems: each one's docstring, data and span."""
    import inspect

    from ..physics import problems

    parts = ["# Named problems", "", "`jaxrot.problems.get(name)`; `jaxrot list problems` prints the same list.", ""]
    for name, factory in problems.PROBLEMS.items():
        p = factory()
        fn = factory if factory.__doc__ else None
        doc = inspect.getdoc(fn) if fn else f"{problems.coulomb_wall.__doc__.strip()} (physical sign)"
        parts += [f"## `{name}`", "", _markdown(doc), "",
                  f"{p.description}. Span t_end = {p.t_end:g}; "
                  f"{'torque-free' if p.torque.is_free else 'torque: `' + type(p.torque).__name__ + '`'}.", ""]
    return "\n".join(parts)


def readme_methods() -> str:
    """The README's table of methods: registered methods grouped by family and by what they declare
    (order per method, exact invariants, torque, kind), a link to each family's page."""
    from ..integrators import REGISTRY

    groups: dict[tuple, list] = {}
    order = list(FAMILIES)
    for i in sorted(REGISTRY.values(), key=lambda i: order.index(i.family)):  # stable: registry order within
        groups.setdefault((i.family, tuple(i.conserves), i.implicit, i.torque), []).append(i)
    rows = ["| family | methods (order) | exact without torque | torque | kind |", "|---|---|---|---|---|"]
    for (family, conserves, implicit, torque), infos in groups.items():
        title = re.split(r" \(|:", FAMILIES[family][0])[0]
        names = ", ".join(f"`{i.name}` ({'exact' if i.order == float('inf') else i.order})" for i in infos)
        cells = [f"[{title}](docs/methods/{PAGE[family]})", names, ", ".join(conserves) or "–",
                 "yes" if torque else "free only", "implicit" if implicit else "explicit"]
        rows.append("| " + " | ".join(c.replace("|", "\\|") if k > 0 else c for k, c in enumerate(cells)) + " |")
    return "\n".join(rows) + "\n"


def readme_problems() -> str:
    """The README's table of named problems."""
    from ..physics import problems

    rows = ["| problem | what it is | span | torque |", "|---|---|---|---|"]
    for name, factory in problems.PROBLEMS.items():
        p = factory()
        torque = "none" if p.torque.is_free else f"`{type(p.torque).__name__}`"
        rows.append(f"| `{name}` | {p.description.replace('|', chr(92) + '|')} | {p.t_end:g} | {torque} |")
    return "\n".join(rows) + "\n"


#: the generated blocks of the README, between ``<!-- name:begin -->`` and ``<!-- name:end -->``
README_BLOCKS = {"methods": readme_methods, "problems": readme_problems}


def readme_block(text: str, name: str) -> str:
    """The current content of a generated block of ``text``."""
    m = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, flags=re.S)
    if m is None:
        raise ValueError(f"no generated block {name!r}")
    return m.group(1)


def update_readme(path: str | pathlib.Path) -> None:
    """Rewrite the README's generated blocks from the registry."""
    path = pathlib.Path(path)
    text = path.read_text()
    for name, render_block in README_BLOCKS.items():
        text = text.replace(readme_block(text, name), render_block())
    path.write_text(text)


def main(out: str | pathlib.Path = "docs") -> list[pathlib.Path]:
    """Write every family's page to ``out/methods/`` and ``out/problems.md``; returns the paths."""
    folder = pathlib.Path(out) / "methods"
    folder.mkdir(parents=True, exist_ok=True)
    (pathlib.Path(out) / "problems.md").write_text(render_problems())
    paths = [pathlib.Path(out) / "problems.md"]
    for family in FAMILIES:
        path = folder / PAGE[family]
        path.write_text(render(family))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in main(sys.argv[1] if len(sys.argv) > 1 else "docs"):
        print(f"wrote {p}")
    readme = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "docs").resolve().parent / "README.md"
    if readme.exists():
        update_readme(readme)
        print(f"updated the generated tables of {readme}")
