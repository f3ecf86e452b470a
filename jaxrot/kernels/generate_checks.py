"""A generated kernel checked against the JAX code it restates before a run uses it
(:mod:`jaxrot.kernels.generate`): one step (or one attempt of a pair) from ``init`` on a few random
states, compared to 10^3 roundings; a restatement that does not compile or does not agree is
refused (:class:`~jaxrot.kernels.jaxpr_warp.Unsupported`) and the run stays on XLA."""

import functools
import os
import threading

import numpy as np

from .jaxpr_warp import Unsupported


def verdict(checked: dict, key, compare, what: str):
    """Whether a restatement may be used: ``compare()`` (compile it and compare it with the JAX function:
    None where they agree, else why not) run once per ``key`` with Warp installed and its CPU compiler
    loaded, its answer kept in ``checked``; raises :class:`Unsupported` with the reason where not."""
    from ._common import have_warp, no_cpu_compiler

    if key not in checked:
        if not have_warp():
            return
        why = no_cpu_compiler()
        if why is not None:  # (not remembered: the compiler may load later in the process)
            err = Unsupported(why)
            err.transient = True
            raise err
        kept = _kept(key, what)
        if kept is not None and _agreed(kept):
            checked[key] = None
        else:
            outer, _COMPARISONS.n = getattr(_COMPARISONS, "n", 0), 0  # (a check made inside another's)
            try:
                checked[key] = compare()
            except Exception as err:  # noqa: BLE001 - Warp's code generator or compiler refused the source
                checked[key] = f"Warp could not compile {what} ({type(err).__name__}: {str(err)[:400]})"
            compared, _COMPARISONS.n = _COMPARISONS.n, outer
            # only an agreement is kept, and only where values were compared (not where they were known
            # only inside a trace): a disagreement may belong to the sampled system's values alone
            if kept is not None and checked[key] is None and compared:
                _keep(kept)
    if checked[key] is not None:
        raise Unsupported(checked[key])


#: how many comparisons of a restatement's values with JAX's (:func:`within`) this thread has made
#: since its check began
_COMPARISONS = threading.local()


def keeping() -> bool:
    """Whether agreements are kept on disk (the environment's ``JAXROT_KEEP_CHECKS``: ``off`` or ``0``
    compares in every process; by default, in the test suite too, a source is compared once for each
    version of this package's kernels code, :func:`_kept`)."""
    return os.environ.get("JAXROT_KEEP_CHECKS", "on").lower() not in ("off", "0", "false", "no")


def _kept(key, what: str) -> str | None:
    """Where an agreement on ``key`` is kept beside Warp's kernel cache, so that the next process using
    the same source skips the comparison (a source's key is the hash of its text and literals, and of a
    step's method's class; the
    versions of jaxrot's kernels' code, of JAX and of Warp are part of the file's name), or None (no
    cache folder)."""
    import hashlib

    import jax

    from ._common import warp

    folder = getattr(warp().config, "kernel_cache_dir", None)
    if not folder or not keeping():
        return None
    versions = (_kernels_code(), jax.__version__, warp().config.version)
    name = hashlib.sha256(repr((key, what, versions)).encode()).hexdigest()
    return os.path.join(folder, "jaxrot-checks", name[:40])


@functools.lru_cache(maxsize=1)
def _kernels_code() -> str:
    """A hash of this package's code (the Warp functions a generated source calls are written here)."""
    import hashlib

    folder = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as f:
                h.update(name.encode() + f.read())
    return h.hexdigest()


def _agreed(path: str) -> bool:
    """Whether an agreement is kept at ``path``: an empty file (anything else: not kept)."""
    try:
        return os.path.isfile(path) and os.path.getsize(path) == 0
    except OSError:
        return False


def _keep(path: str) -> None:
    """Keep an agreement at ``path`` (an empty file, written under a temporary name, then renamed: a
    reader never sees a half-made one); a folder that cannot be written only costs the next process the
    comparison."""
    import tempfile

    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
        os.close(fd)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def within(got, want, tol):
    """Where ``got`` agrees with ``want`` to ``tol`` (NaN where both are, equal infinities)."""
    _COMPARISONS.n = getattr(_COMPARISONS, "n", 0) + 1
    return (np.abs(got - want) <= tol) | (np.isnan(got) & np.isnan(want)) | (got == want)


def disagreement(what: str, names, got, want, tol, n: int) -> str | None:
    """Why the generated results ``got`` (one array per name, ``n`` test states) are not the JAX code's
    ``want``: each to 10^3 roundings of its state's largest value, plus ``tol[name]``; or None."""
    for name, g_, w in zip(names, got, want):
        g_, w = np.reshape(g_, (n, -1)), np.reshape(w, (n, -1))
        if w.size == 0:  # (a method without memory)
            continue
        scale = np.max(np.abs(np.where(np.isfinite(w), w, 0.0)), axis=1, keepdims=True)
        ok = within(g_, w, 1000 * np.finfo(w.dtype).eps * scale + tol.get(name, 0.0))
        if not np.all(ok):
            i = int(np.argmin(np.all(ok, axis=1)))
            return f"the generated {what} differs from the JAX code at a test state ({name}: {g_[i].tolist()} against {w[i].tolist()})"
    return None


def _traced(method, system, traced) -> bool:
    import jax

    from .generate import parts

    arrays = jax.tree_util.tree_leaves(parts(method, system)[0])
    return bool(traced) or any(isinstance(x, jax.core.Tracer) for x in arrays)


def reference_values(fn, *args):
    """``fn`` mapped over the leading axis of the concrete arrays ``args``, as NumPy arrays (also inside
    a trace). One compiled program: evaluated operation by operation, a method's step compiles each of
    its hundreds of operations as a program of its own, seconds of a first fused run."""
    import jax

    # (lowered and compiled ahead of time: called with concrete arrays, the executable runs also inside
    # a caller's trace, and constants in ``fn`` are not evaluated one operation at a time)
    args = jax.tree_util.tree_map(np.asarray, args)
    out = jax.jit(jax.vmap(fn)).lower(*args).compile()(*args)
    return jax.tree_util.tree_map(np.asarray, out)


def random_attitudes(rng, n: int, dtype):
    """``n`` random attitudes (3x3) at ``dtype`` from the generator ``rng``."""
    from ..geometry import so3

    return reference_values(so3.exp, rng.normal(size=(n, 3)).astype(dtype))


def sample_points(dtype, n: int = 6):
    """``(t, R, Pi)``: ``n`` random times in [0, 1), attitudes and momenta at ``dtype``, where a restated
    torque or event condition is compared with its JAX function."""
    rng = np.random.default_rng(0)
    t = rng.uniform(0.0, 1.0, n).astype(dtype)
    return t, random_attitudes(rng, n, dtype), rng.normal(size=(n, 3)).astype(dtype)


def sample_states(system, dtype, n: int):
    """``(J, R, Pi, h)``: ``n`` random attitudes and momenta (rates of a few rad/s) of the system's body,
    and a step turning them by at most 0.01 rad."""
    rng = np.random.default_rng(0)
    J = np.asarray(system.body.J, dtype)
    R = random_attitudes(rng, n, dtype)
    Om = rng.normal(size=(n, 3)) * 2.0
    h = np.asarray(1e-2 / max(1.0, float(np.max(np.abs(Om)))), dtype)
    return J, R, (Om * J).astype(dtype), h


def check(method, system, dtype, hit, pair: bool, event=None, alone: bool = False):
    """Compare the generated functions of ``hit`` (``(key, memory length, traced)``) with ``method``'s
    step (``pair``: its attempt); raises ``Unsupported``. ``event``: a constant step is checked on the
    kernel of a run with it where that kernel builds (the one such a run launches; no other is compiled);
    a pair's attempt in the Warp module of its plain kernel, or ``alone`` in a module of its own (for a
    run that launches another kernel: :func:`jaxrot.kernels.adaptive_kernel.check_kernel`)."""
    if pair:
        verdict(_CHECKED_PAIRS, (hit[0], np.dtype(dtype).name),
                lambda: _compare_pair(method, system, dtype, hit, alone), "the generated attempt")
    else:
        verdict(_CHECKED, (hit[0], np.dtype(dtype).name), lambda: _compare(method, system, dtype, hit, event),
                "the generated step")


#: (key, dtype name) -> None (compiled and agreed) or why not
_CHECKED: dict = {}


def _compare(method, system, dtype, hit, event=None):
    import jax
    import jax.numpy as jnp

    from ..geometry.state import State
    from ._common import so3_funcs, warp

    from . import event_launch, fixed_loop
    from .adaptive_tangents import Carried
    from .generate import attempt_types, memory_row, params

    key, n_mem, traced = hit
    given = isinstance(method, Carried)  # (its run is given each body's memory: tangents to compare)
    wp = warp()
    name = np.dtype(dtype).name
    n = 4
    if _traced(method, system, traced):
        return None  # (the values are known only inside the trace; the run's launch compiles the kernel)
    with jax.ensure_compile_time_eval():
        J, R, Pi, h = sample_states(system, dtype, n)
        P = np.asarray(params(method, system, dtype))
        A0, memory = _memories(method, system, dtype, R, Pi, h, n_mem, given)
    S = getattr(wp, name)  # (warp.float32 or warp.float64)
    c = so3_funcs(S)
    dev = "cpu"
    A_T = attempt_types(S, key)
    outs = [wp.zeros((n, 1), dtype=c.M, device=dev), wp.zeros((n, 1), dtype=c.V, device=dev),
            *(wp.zeros(n, dtype=t, device=dev) for t in (wp.int32, wp.int32, S, c.M, c.V, wp.int32)),
            wp.zeros((n, 1), dtype=A_T, device=dev)]

    def launch(kernel, Q):  # one step of each test state (the first frame)
        ins = [wp.array(R, dtype=c.M, device=dev), wp.array(Pi, dtype=c.V, device=dev),
               wp.array(A0, dtype=A_T, device=dev),
               wp.array(np.reshape(h, (1,)), dtype=S, device=dev), wp.array(np.zeros(1, dtype), dtype=S, device=dev),
               wp.array(J.reshape(1, 3), dtype=c.V, device=dev), wp.array(P, dtype=S, device=dev),
               wp.array(Q, dtype=S, device=dev), 1, 1]
        wp.launch(kernel, dim=n, inputs=ins + outs, device=dev)

    launched = False
    if event is not None:
        try:  # the kernel of the run with its event (the event's values do not reach the step's result)
            ev, _, Q = event_launch(method, system, dtype, event, P)
            launch(fixed_loop.kernel(name, key, ev, False)[1],
                   np.zeros(Q.shape, dtype) if isinstance(Q, jax.core.Tracer) else np.asarray(Q))
            launched = True
        except Exception:  # noqa: BLE001 - an event the run refuses (its own refusal says why)
            pass
    if not launched:
        launch(fixed_loop.kernel(name, key, None, given)[1], np.zeros(1, dtype))

    def ref(R, Pi, aux):
        new, aux1, _ = method.step(system, jnp.asarray(0.0, dtype), State(R, Pi), aux, h)
        return new.R, new.Pi, memory_row(aux1, dtype)[:-1]

    want = reference_values(ref, R, Pi, memory)
    got = [outs[0].numpy()[:, 0], outs[1].numpy()[:, 0]]
    # (the memory at the frame is written where the run is given it: the tangents)
    return disagreement("step", ("R", "Pi", "memory"), got + ([outs[-1].numpy()[:, 0, :-1]] if given else []), want, {}, n)


#: (key, dtype name) -> None (compiled and agreed) or why not, for the pairs' attempts
_CHECKED_PAIRS: dict = {}


@functools.lru_cache(maxsize=None)
def attempt_kernel(S, key: str, module: str, given: bool = False):
    """A kernel of one attempt of the generated pair ``key`` per body (its new state, memory and scaled
    error) from ``init``'s memory, or ``given`` from ``A0``'s, defined in the Warp ``module``
    (:func:`jaxrot.kernels.adaptive_kernel.check_kernel`: the module of the pair's plain kernel, which
    compiles the attempt once for both)."""
    from ._common import so3_funcs, warp

    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    from .generate import attempt_funcs, attempt_types

    init, attempt = attempt_funcs(S, key)
    GIVEN = bool(given)

    def one(R0, Pi0, A0, h, rt, at, Jv, P, R_out, Pi_out, err_out, A_out):
        b = wp.tid()
        J = Jv[0]
        A = init(R0[b], Pi0[b], J, P, h)
        if wp.static(GIVEN):
            A = A0[b]
        R1, Pi1, A1, err = attempt(R0[b], Pi0[b], A, S(0.0), h, J, P, rt, at)
        R_out[b] = R1
        Pi_out[b] = Pi1
        err_out[b] = err
        A_out[b] = A1

    # (annotations set here: this module's are strings, which Warp would look up among its globals)
    A, A_T = wp.array, attempt_types(S, key)
    one.__annotations__ = dict(R0=A(dtype=M), Pi0=A(dtype=V), A0=A(dtype=A_T), h=S, rt=S, at=S, Jv=A(dtype=V),
                               P=A(dtype=S), R_out=A(dtype=M), Pi_out=A(dtype=V), err_out=A(dtype=S),
                               A_out=A(dtype=A_T))
    one.__name__ = one.__qualname__ = f"attempt_{key}_{S.__name__}"
    return wp.kernel(one, module=module, enable_backward=False)


def _compare_pair(pair, system, dtype, hit, alone: bool = False):
    import jax
    import jax.numpy as jnp

    from ..geometry.state import State
    from ..physics.flow import pack_body
    from ._common import so3_funcs, warp

    from .generate import attempt_types, memory_row, params

    from .adaptive_kernel import check_kernel

    from .adaptive_tangents import Carried

    key, n_mem, traced = hit
    wp = warp()
    S = {np.dtype(np.float32): wp.float32, np.dtype(np.float64): wp.float64}[np.dtype(dtype)]
    given = isinstance(pair, Carried)  # (its run is given each body's memory: tangents to compare)
    kernel = check_kernel(np.dtype(dtype).name, key, int(pair.error_order()), alone, given)
    n = 4
    rt = at = 1e-6
    if _traced(pair, system, traced):
        # the values are known only inside the trace: nothing compared; the module the run launches is
        # compiled here where the check shares it, so that a source Warp cannot compile is refused
        if not alone:
            wp.load_module(kernel.module, device="cpu")
        return None
    with jax.ensure_compile_time_eval():
        J, R, Pi, h = sample_states(system, dtype, n)
        A0, memory = _memories(pair, system, dtype, R, Pi, h, n_mem, given)

        def ref(R, Pi, aux):
            s = State(R, Pi)
            new, aux1, _, y_err = pair.step_with_error(system, jnp.asarray(0.0, dtype), s, aux, h)
            err = pair.error_norm(pack_body(R, Pi), pack_body(new.R, new.Pi), y_err, jnp.asarray(rt, dtype),
                                  jnp.asarray(at, dtype))
            return new.R, new.Pi, err, memory_row(aux1, dtype)[:-1]

        P = np.asarray(params(pair, system, dtype))
    want = list(reference_values(ref, R, Pi, memory))
    c = so3_funcs(S)
    dev = "cpu"
    A_T = attempt_types(S, key)
    outs = [wp.zeros(n, dtype=c.M, device=dev), wp.zeros(n, dtype=c.V, device=dev), wp.zeros(n, dtype=S, device=dev),
            wp.zeros(n, dtype=A_T, device=dev)]
    wp.launch(kernel, dim=n, device=dev, inputs=[wp.array(R, dtype=c.M, device=dev), wp.array(Pi, dtype=c.V, device=dev),
                                                  wp.array(A0, dtype=A_T, device=dev), S(h), S(rt), S(at),
                                                  wp.array(J.reshape(1, 3), dtype=c.V, device=dev),
                                                  wp.array(P, dtype=S, device=dev), *outs])
    got = [o.numpy() for o in outs]
    got[3] = got[3][:, :-1]  # (the memory without the step's converged flag)
    # the error is a difference of two results scaled by the tolerance: its rounding is eps / rtol
    return disagreement("attempt", ("R", "Pi", "error", "memory"), got, want,
                        {"error": 1000 * np.finfo(dtype).eps / rt}, n)


def _memories(method, system, dtype, R, Pi, h, n_mem: int, given: bool):
    """``(A0, memory)`` of the test states: where the run is ``given`` each body's memory (tangents carried,
    :func:`jaxrot.kernels.adaptive_tangents.check_memory`) those memories, else ``init``'s (the kernel
    computes its own; ``A0`` unread)."""
    import jax.numpy as jnp

    from ..geometry.state import State
    from .adaptive_tangents import check_memory

    if given:
        return check_memory(method, system, dtype, R, Pi, h)
    memory = reference_values(lambda R, Pi: method.init(system, jnp.asarray(0.0, dtype), State(R, Pi), h), R, Pi)
    return np.zeros((np.shape(R)[0], n_mem), dtype), memory
