"""The Warp kernel of a pair's error-controlled loop, one thread per body (:func:`adaptive_kernel`;
see :mod:`jaxrot.kernels.adaptive` for the loop it restates), around the fused loop's template
(:func:`jaxrot.kernels.loop.loop`) with error control, the pair's attempt generated from its JAX code
(:func:`jaxrot.kernels.generate.attempt_funcs`), and the cache of built kernels (:func:`kernel_for`; a
pair's plain kernel shares its Warp module with the kernel that checks the attempt, :func:`check_kernel`).
"""

import functools

from ._common import so3_funcs, warp
from ..integrators.dense_output import polishes
from .adaptive_pairs import GENERATED_PAIRS, GeneratedPair
from .generate import attempt_funcs, attempt_types
from .generate_dh import step_dh
from .loop import as_kernel, loop

__all__ = ["adaptive_kernel", "kernel_for", "check_kernel", "shares_check"]


def adaptive_kernel(S, entry: GeneratedPair, torque_key: str | None, event_key: str | None = None,
                    direction: int | None = None, terminal: bool = True, record: bool = False, *, key: str,
                    module: str | None = None, given: bool = False):
    """The Warp kernel of a generated pair's error-controlled loop, one thread per body (see the
    module docstring). Arguments: ``R0`` (B) 3x3, ``Pi0`` (B) 3-vectors, ``h0``, ``rtol``, ``atol``, ``A0`` (B),
    ``t0`` (1), ``ts`` (n), ``J`` (1) 3-vector, ``P`` (the pair's parameters), ``Q`` (with an event
    the condition's parameters, then those of the dense output's torque ``torque_key``), ``max_steps``,
    ``n_out``; outputs ``R_out``, ``Pi_out`` (B, n), ``acc``, ``rej``, ``err``, ``result``, ``t_event``,
    ``R_event``, ``Pi_event`` (B); with ``record`` (for :mod:`jaxrot.kernels.adaptive_backward` and
    :mod:`jaxrot.kernels.adaptive_saved`), each accepted step's start ``R_rec``, ``Pi_rec``, ``t_rec``
    and length ``h_rec`` (B, capacity: the first steps; after a terminal event's crossing step, ``acc``
    of them, the state after it in column ``acc`` with its time and length 0) and the accepted steps
    before each output ``out_k`` (B, n); with ``given``, each body's memory at the start is read from
    ``A0`` (B) instead of the pair's ``init`` and the memory at each output written to ``A_out`` (B, n)
    (:mod:`jaxrot.kernels.adaptive_tangents`). ``module``: the Warp module it is defined in (None: its own)."""
    wp = warp()
    V, M = so3_funcs(S).V, so3_funcs(S).M
    init, attempt = attempt_funcs(S, entry.key)
    event = None if event_key is None else (torque_key, event_key, direction, terminal,
                                            polishes(entry.high_order) and step_dh(S, entry.key))
    body = loop(S, init, attempt, None, event, record, entry.controller_order, given)
    A_T = attempt_types(S, entry.key)

    def run(R0: wp.array(dtype=M), Pi0: wp.array(dtype=V), h0v: wp.array(dtype=S), rtolv: wp.array(dtype=S),
            atolv: wp.array(dtype=S), A0: wp.array(dtype=A_T), t0v: wp.array(dtype=S), ts: wp.array(dtype=S), Jv: wp.array(dtype=V),
            P: wp.array(dtype=S), Q: wp.array(dtype=S), max_steps: wp.int32, n_out: wp.int32,
            R_out: wp.array2d(dtype=M), Pi_out: wp.array2d(dtype=V), acc_out: wp.array(dtype=wp.int32),
            rej_out: wp.array(dtype=wp.int32), err_out: wp.array(dtype=S), result_out: wp.array(dtype=wp.int32),
            tev_out: wp.array(dtype=S), Rev_out: wp.array(dtype=M), Piev_out: wp.array(dtype=V),
            R_rec: wp.array2d(dtype=M), Pi_rec: wp.array2d(dtype=V), t_rec: wp.array2d(dtype=S),
            h_rec: wp.array2d(dtype=S), out_k: wp.array2d(dtype=wp.int32), A_out: wp.array2d(dtype=A_T)):
        b = wp.tid()
        acc, rej, failed, err, code = body(
            b, R0[b], Pi0[b], A0, h0v[b], rtolv[b], atolv[b], t0v[0], ts, Jv[0], P, Q, max_steps, n_out, 1, R_out,
            Pi_out, tev_out, Rev_out, Piev_out, R_rec, Pi_rec, t_rec, h_rec, out_k, A_out)
        acc_out[b] = acc
        rej_out[b] = rej
        err_out[b] = err
        result_out[b] = code

    return as_kernel(run, f"adaptive_{key}", module)


def _name(key: str, dtype_name: str, variant: str = "") -> str:
    return f"gen_{key}_{dtype_name}{variant}"


@functools.lru_cache(maxsize=None)
def kernel_for(dtype_name: str, pair: str, torque_key, event_key, direction, terminal, record=False,
               given=False):
    """``(Warp scalar type, kernel)``, built once per (dtype, pair, the dense output's torque, event,
    recording or not, memory given or not)."""
    S = getattr(warp(), dtype_name)  # (warp.float32 or warp.float64)
    entry = GENERATED_PAIRS[pair]
    if event_key is None and not record:
        return S, _with_check(dtype_name, entry.key, entry.controller_order, given)[0]
    ev = ("" if event_key is None else f"_{torque_key}_ev{event_key}_{direction}_{int(terminal)}") + ("_rec" if record else "")
    return S, adaptive_kernel(S, entry, torque_key, event_key, direction, terminal, record,
                              key=_name(entry.key, dtype_name, ev))


def shares_check(event, record: bool) -> bool:
    """Whether a run launches the pair's plain kernel (:func:`kernel_for` without an event or a record)
    on the CPU, whose Warp module holds the attempt's check (:func:`check_kernel`)."""
    import jax

    return event is None and not record and jax.default_backend() == "cpu"


def check_kernel(dtype_name: str, key: str, controller_order: int, alone: bool = False, given: bool = False):
    """The kernel that checks the generated attempt ``key`` of a pair whose controller takes
    ``controller_order`` against its JAX code (:func:`jaxrot.kernels.generate_checks.attempt_kernel`), in
    the Warp module of the pair's plain kernel, or ``alone`` in a module of its own (a run that launches
    another kernel, :func:`shares_check`: the plain kernel's loop would be compiled for nothing);
    ``given``: the attempt from a memory given (that of a run whose kernel is given its memory)."""
    from .generate_checks import attempt_kernel

    if alone:
        return attempt_kernel(getattr(warp(), dtype_name), key, "unique", given)
    return _with_check(dtype_name, key, controller_order, given)[1]


@functools.lru_cache(maxsize=None)
def _with_check(dtype_name: str, key: str, controller_order: int, given: bool = False):
    """``(plain kernel, check kernel)`` of the generated attempt ``key``, both defined in one Warp module
    before either is launched: the long generated attempt is compiled once for the check and the run
    (``given``: the run's memory given, :func:`adaptive_kernel`; a pair whose memory carries tangents
    is run only so)."""
    from ._common import fuse_fp
    from .generate_checks import attempt_kernel

    wp = warp()
    S = getattr(wp, dtype_name)
    module = f"jaxrot_attempt_{_name(key, dtype_name)}_q{controller_order}{'_given' if given else ''}"
    wp.set_module_options({"fuse_fp": fuse_fp(), "enable_backward": False}, module=module)
    # (without an event the kept result's order, which decides how events are polished, is not read)
    run = adaptive_kernel(S, GeneratedPair(key, controller_order, None), None, key=_name(key, dtype_name), module=module,
                          given=given)
    return run, attempt_kernel(S, key, module, given)
