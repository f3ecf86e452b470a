"""The torques of the fused kernels as Warp functions: each torque kind's named parameters (one list,
:data:`PARAM_LAYOUT`, for the packing and a Warp struct) and the world torque with its derivatives
(:func:`torque_funcs`)."""


import functools
import math
import types

from ._common import exec_source, so3_funcs, warp


#: The named parameters of a torque kind, in the order :func:`jaxrot.kernels.torque_params` packs them
#: into a kernel's parameter array ``P``: ``(name, size)``, each the torque's attribute of that name. The
#: kernels read them by name from the kind's Warp struct (:func:`param_struct`), never by position.
PARAM_LAYOUT: dict[str, tuple[tuple[str, int], ...]] = {
    "gravity": (("mgl", 1), ("com", 3), ("up", 3)),
    "gravity_gradient": (("n", 1), ("phase", 1), ("J", 3)),
}


@functools.lru_cache(maxsize=None)
def param_struct(S, kind: str):
    """``(struct, unpack)`` of a torque kind of :data:`PARAM_LAYOUT`: a Warp struct with one field per
    parameter (a scalar, or a vector for a size-3 parameter), and the Warp function ``unpack(P)`` that
    fills it from the parameter array. Both are generated from the layout, so the packing
    (:func:`jaxrot.kernels.torque_params`) and the reading are written once."""
    wp = warp()
    V = so3_funcs(S).V
    layout = PARAM_LAYOUT[kind]
    if any(n not in (1, 3) for _, n in layout):
        raise ValueError(f"PARAM_LAYOUT[{kind!r}]: a parameter is a scalar (size 1) or a 3-vector (size 3)")
    name = f"{kind}_params_{S.__name__}"
    fields = {f: (S if n == 1 else V) for f, n in layout}
    T = wp.struct(type(name, (), {"__annotations__": fields, "__module__": __name__, "__qualname__": name}))
    lines, off = ["def unpack(P: wp.array(dtype=S)):", "    x = T()"], 0
    for f, n in layout:
        value = f"P[{off}]" if n == 1 else f"V({', '.join(f'P[{off + k}]' for k in range(n))})"
        lines.append(f"    x.{f} = {value}")
        off += n
    src = "\n".join([*lines, "    return x"]) + "\n"
    env = exec_source(src, f"jaxrot-{name}", {"wp": wp, "S": S, "V": V, "T": T, "__name__": f"jaxrot_{name}"})
    return T, wp.func(env["unpack"])


@functools.lru_cache(maxsize=None)
def torque_funcs(S, torque: str, K: int):
    """The world torque ``tau(t, R, Pi; P)`` of a torque kind (``"free"``, ``"gravity"``, ``"poly"``,
    ``"gravity_gradient"``, or ``"user:<key>"``: a plain function restated by :mod:`.transpile`)
    with its parameters packed in the array ``P`` (see :func:`jaxrot.kernels.torque_params`), and
    ``momentum_derivative(t, P, m)``: ``L^(m)(t)`` of a prescribed polynomial momentum (``"poly"``:
    ``L(t) = sum_k t^k / k! c_k``, ``K`` coefficients)."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    USER = torque.startswith("user:")
    if USER:
        from .transpile import user_tau

        user = user_tau(S, torque.split(":", 1)[1])
    else:
        @wp.func
        def user(t: S, R: M, Pi: V, P: wp.array(dtype=S)):
            return V(S(0.0), S(0.0), S(0.0))

    gravity_params = param_struct(S, "gravity")[1]
    orbit_params = param_struct(S, "gravity_gradient")[1]

    @wp.func
    def gravity(R: M, P: wp.array(dtype=S)):
        g = gravity_params(P)
        chi = R @ g.com
        return -g.mgl * wp.cross(chi, g.up)

    @wp.func
    def nadir(t: S, P: wp.array(dtype=S)):
        # the world nadir (cos a, sin a, 0) of the orbit's angle a = n t + phase
        o = orbit_params(P)
        a = o.n * t + o.phase
        return V(wp.cos(a), wp.sin(a), S(0.0))

    @wp.func
    def gravity_gradient_body(cb: V, P: wp.array(dtype=S)):
        """The body torque ``3 n^2 c x J c`` of the body-frame nadir ``c``."""
        o = orbit_params(P)
        return (S(3.0) * (o.n * o.n)) * wp.cross(cb, wp.cw_mul(o.J, cb))

    @wp.func
    def coefficient(P: wp.array(dtype=S), k: int):
        """The polynomial momentum's ``k``-th coefficient ``c_k`` (P holds them row by row)."""
        return V(P[3 * k], P[3 * k + 1], P[3 * k + 2])

    @wp.func
    def gravity_gradient(t: S, R: M, P: wp.array(dtype=S)):
        return R @ gravity_gradient_body(wp.transpose(R) @ nadir(t, P), P)

    @wp.func
    def momentum_derivative(t: S, P: wp.array(dtype=S), m: int):
        out = V(S(0.0), S(0.0), S(0.0))
        fact = S(1.0)
        for k in range(m, K):
            out = out + fact * coefficient(P, k)
            fact = fact * t / S(k - m + 1)
        return out

    # 1/k! as constants, for L'(t) by Horner's rule with multiplications only (body_tau_at)
    IF = [1.0 / math.factorial(k) for k in range(max(K, 1))]

    @wp.func
    def momentum_rate(t: S, P: wp.array(dtype=S)):
        """``L'(t) = sum_(k>=1) t^(k-1) / (k-1)! c_k``, as ``momentum_derivative(t, P, 1)`` without its
        divisions (rounds differently)."""
        out = V(S(0.0), S(0.0), S(0.0))
        if wp.static(K >= 2):
            out = S(wp.static(IF[K - 2])) * coefficient(P, K - 1)
            for j in range(wp.static(K - 2)):
                out = out * t + S(wp.static(IF[K - 3 - j])) * coefficient(P, K - 2 - j)
        return out

    @wp.func
    def tau(t: S, R: M, Pi: V, P: wp.array(dtype=S)):
        out = V(S(0.0), S(0.0), S(0.0))
        if wp.static(torque == "gravity"):
            out = gravity(R, P)
        if wp.static(torque == "poly"):
            out = momentum_derivative(t, P, 1)
        if wp.static(torque == "gravity_gradient"):
            out = gravity_gradient(t, R, P)
        if wp.static(USER):
            out = user(t, R, Pi, P)
        return out

    @wp.func
    def body_tau_at(t: S, R: M, E: M, Pi: V, P: wp.array(dtype=S)):
        """The body-frame torque ``(R E)^T tau(t, R E, Pi)`` at the attitude ``R E``, without forming
        ``R E``: world vectors are brought to the body by ``E^T (R^T w)`` (gravity: ``-mgl c x (R E)^T up``)."""
        out = V(S(0.0), S(0.0), S(0.0))
        Et = wp.transpose(E)
        Rt = wp.transpose(R)
        if wp.static(torque == "gravity"):
            g = gravity_params(P)
            out = -g.mgl * wp.cross(g.com, Et @ (Rt @ g.up))
        if wp.static(torque == "poly"):
            out = Et @ (Rt @ momentum_rate(t, P))
        if wp.static(torque == "gravity_gradient"):
            out = gravity_gradient_body(Et @ (Rt @ nadir(t, P)), P)
        if wp.static(USER):  # a function of the attitude itself: R E is formed
            RE = R @ E
            out = wp.transpose(RE) @ user(t, RE, Pi, P)
        return out

    return types.SimpleNamespace(tau=tau, body_tau_at=body_tau_at, gravity=gravity, gravity_params=gravity_params,
                                 orbit_params=orbit_params, nadir=nadir,
                                 gravity_gradient=gravity_gradient, gravity_gradient_body=gravity_gradient_body,
                                 momentum_derivative=momentum_derivative)
