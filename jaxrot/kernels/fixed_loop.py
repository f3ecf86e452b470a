"""The fused constant-step run: one Warp kernel (:func:`loop_kernel`), one thread per body running the
loop template (:func:`jaxrot.kernels.loop.loop`) at constant steps, with or without an event; the
method's ``init``, ``step`` and ``reason`` generated from its JAX code (:func:`jaxrot.kernels.generate.funcs`).
Frame ``k`` is the state after ``(k + 1) * save_every`` steps; after a terminal event the frames hold
the state after the crossing step, and ``steps`` says how many steps were taken.
"""

import functools

from ._common import so3_funcs, warp
from .loop import as_kernel, loop

__all__ = ["OUTPUTS", "kernel", "loop_kernel", "output_dims"]

#: the kernel's outputs in order; the last four (the event's and the steps taken) written only with an event
OUTPUTS = ("R_out", "Pi_out", "failed_out", "result_out", "tev_out", "Rev_out", "Piev_out", "steps_out", "A_out")


def output_dims(B: int, n_frames: int, given: bool = False) -> dict:
    """The kernel's output shapes for a batch of ``B`` bodies (the memory at the frames, ``A_out``, of
    one column where the memory is not ``given``)."""
    return {"R_out": (B, n_frames), "Pi_out": (B, n_frames), **{k: (B,) for k in OUTPUTS[2:8]},
            "A_out": (B, n_frames if given else 1)}


def loop_kernel(S, init, step, reason, event=None, *, key: str, A_T, given: bool = False):
    """The fused constant-step run of scalar type ``S`` (see the module docstring): ``init``, ``step``,
    ``reason`` and ``event`` as :func:`jaxrot.kernels.loop.loop` takes them. Arguments: ``R0`` (B) 3x3,
    ``Pi0`` (B) 3-vectors, ``A0`` (B) the memory at the start (read with ``given``, else ``init``'s; the
    memory of type ``A_T`` at each frame then written to ``A_out``), ``dt``, ``t0`` (1), ``J`` (1) 3-vector, ``P`` (the method's parameters), ``Q`` (with an
    event the condition's parameters, then those of the dense output's torque), ``n_frames``,
    ``save_every``; outputs :data:`OUTPUTS`."""
    wp = warp()
    V, M = so3_funcs(S).V, so3_funcs(S).M
    body = loop(S, init, step, reason, event, given=given)

    def run(R0: wp.array(dtype=M), Pi0: wp.array(dtype=V), A0: wp.array(dtype=A_T), dtv: wp.array(dtype=S),
            t0v: wp.array(dtype=S),
            Jv: wp.array(dtype=V), P: wp.array(dtype=S), Q: wp.array(dtype=S), n_frames: wp.int32,
            save_every: wp.int32, R_out: wp.array2d(dtype=M), Pi_out: wp.array2d(dtype=V),
            failed_out: wp.array(dtype=wp.int32), result_out: wp.array(dtype=wp.int32), tev_out: wp.array(dtype=S),
            Rev_out: wp.array(dtype=M), Piev_out: wp.array(dtype=V), steps_out: wp.array(dtype=wp.int32),
            A_out: wp.array2d(dtype=A_T)):
        b = wp.tid()
        # (no tolerances, output times or record: dt and the frames stand in for the arrays not read)
        k, rej, failed, err, code = body(
            b, R0[b], Pi0[b], A0, dtv[0], S(0.0), S(0.0), t0v[0], dtv, Jv[0], P, Q, n_frames * save_every, n_frames,
            save_every, R_out, Pi_out, tev_out, Rev_out, Piev_out, R_out, Pi_out, R_out, R_out, R_out, A_out)
        failed_out[b] = failed
        result_out[b] = code
        if wp.static(event is not None):
            steps_out[b] = k

    return as_kernel(run, f"fused_{key}")


@functools.lru_cache(maxsize=None)
def kernel(dtype_name: str, gen_key: str, event=None, given: bool = False):
    """``(Warp scalar type, kernel)`` of the generated method ``gen_key`` (:mod:`jaxrot.kernels.generate`)
    at ``dtype_name``, with ``event`` and ``given`` as :func:`loop_kernel` takes them; built once."""
    from . import generate, generate_dh

    S = getattr(warp(), dtype_name)  # (warp.float32 or warp.float64)
    ev = ("" if event is None else "_{}_ev{}_{}_{:d}_{:d}".format(*event)) + ("_given" if given else "")
    if event is not None:  # (a polished event: the step's derivative in its length, for the last slope)
        event = (*event[:4], generate_dh.step_dh(S, gen_key) if event[4] else None)
    return S, loop_kernel(S, *generate.funcs(S, gen_key), event, key=f"gen_{gen_key}_{dtype_name}{ev}",
                          A_T=generate.attempt_types(S, gen_key), given=given)
