"""Buss's closed formulas for the derivatives of the world angular velocity, and the Taylor terms of
the gravity torque along the flow.

:func:`formulas` returns plain Python functions of the algebra it is given: ``jnp.cross`` and a JAX
``I_w^-1`` for :mod:`jaxrot.integrators.buss` (the ``V``, ``M`` annotations are for an algebra whose
compiler reads them, unused in JAX). The fused kernels are generated from the JAX methods that use
them (:mod:`jaxrot.kernels.generate`), so a kernel agrees with its JAX method to round-off.

With ``w = I_w^-1 L`` and the derivatives ``L', L'', L'''`` of the world momentum::

    w'   = I^-1 (L' - w x L)
    w''  = w x w' + I^-1 (L'' - w' x L - 2 w x L' + w x (w x L))
    w''' = 2 w x w'' - w x (w x w') + I^-1 [L''' - 3 w x L'' - 3 w' x L' - w'' x L + w' x (w x L)
                                           + 2 w x (w' x L) + 3 w x (w x L') - w x (w x (w x L))]

For gravity ``tau = -mgl chi x up`` with the world centre of mass ``chi = R c`` (``chi' = w x chi``),
``L^(k+1) = -mgl chi^(k) x up`` with::

    chi'   = w x chi
    chi''  = w' x chi + w x chi'
    chi''' = w'' x chi + 2 w' x chi' + w x chi''

The JAX methods take ``L^(k)`` of any torque from Taylor-mode AD (:func:`jaxrot.physics.flow.momentum_derivatives`);
gravity's closed terms here are checked against it (``tests/test_buss.py``).

Reference: Buss, J. Comput. Phys. 164 (2000) 377-406, Section 4.
"""

import types


def formulas(cross, inv, num, V=None, M=None):
    """The rate formulas over an algebra: ``cross(a, b)``, ``inv(R, J, x) = R diag(1/J) R^T x``, and
    ``num(c)``, a constant in the run's scalar type (``float`` in JAX, ``wp.float64``/``wp.float32`` in
    Warp). ``V`` and ``M``: the vector and matrix types for Warp's annotations (None in JAX).

    Returns a namespace of ``rate1(R, J, w, L, L1) = w'``, ``rate2(R, J, w, w1, L, L1, L2) = w''``,
    ``rate3(R, J, w, w1, w2, L, L1, L2, L3) = w'''``, ``gravity_term(mgl, chi_k, up) = L^(k+1)``,
    ``chi1(w, chi)``, ``chi2(w, w1, chi, c1)``, ``chi3(w, w1, w2, chi, c1, c2)``."""

    def rate1(R: M, J: V, w: V, L: V, L1: V):
        return inv(R, J, L1 - cross(w, L))

    def rate2(R: M, J: V, w: V, w1: V, L: V, L1: V, L2: V):
        return cross(w, w1) + inv(R, J, L2 - cross(w1, L) - num(2.0) * cross(w, L1) + cross(w, cross(w, L)))

    def rate3(R: M, J: V, w: V, w1: V, w2: V, L: V, L1: V, L2: V, L3: V):
        wL = cross(w, L)
        return (num(2.0) * cross(w, w2) - cross(w, cross(w, w1))
                + inv(R, J, L3 - num(3.0) * cross(w, L2) - num(3.0) * cross(w1, L1) - cross(w2, L)
                      + cross(w1, wL) + num(2.0) * cross(w, cross(w1, L))
                      + num(3.0) * cross(w, cross(w, L1)) - cross(w, cross(w, wL))))

    def gravity_term(mgl: num, chi_k: V, up: V):
        return -mgl * cross(chi_k, up)

    def chi1(w: V, chi: V):
        return cross(w, chi)

    def chi2(w: V, w1: V, chi: V, c1: V):
        return cross(w1, chi) + cross(w, c1)

    def chi3(w: V, w1: V, w2: V, chi: V, c1: V, c2: V):
        return cross(w2, chi) + num(2.0) * cross(w1, c1) + cross(w, c2)

    return types.SimpleNamespace(rate1=rate1, rate2=rate2, rate3=rate3, gravity_term=gravity_term, chi1=chi1,
                                 chi2=chi2, chi3=chi3)
