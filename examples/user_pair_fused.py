"""A method written in your own file runs in a fused kernel: a third-order Crouch-Grossman step with an
embedded second-order estimate, defined here with the public API only, run with error control and a
terminal event in one compiled kernel (the kernel is generated from the JAX code below; no Warp is
written for it), checked against the XLA loop, and differentiated.

Run: python examples/user_pair_fused.py   (needs the fast extra: pip install 'jaxrot[fast]')
"""

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import jaxrot  # noqa: E402
from jaxrot import State, StepStats, so3  # noqa: E402
from jaxrot.integrators import AbstractPair  # noqa: E402
from jaxrot.physics.flow import pack_body  # noqa: E402


class CrouchGrossman32(AbstractPair):
    """The third-order Crouch-Grossman method (Crouch & Grossman, J. Nonlinear Sci. 3 (1993); the
    coefficients of Owren & Marthinsen, BIT 39 (1999)) on ``R' = R hat(Om)``, ``Pi' = Pi x Om + R^T tau``::

        R_i = R exp(h a_i1 hat K_1) ... exp(h a_i,i-1 hat K_{i-1}),  K_i = Om(R_i, Pi_i)
        R_1 = R exp(h b_1 hat K_1) exp(h b_2 hat K_2) exp(h b_3 hat K_3)

    with ``a21 = 3/4``, ``a31 = 119/216``, ``a32 = 17/108``, ``b = (13/51, -2/3, 24/17)``, ``c = (0, 3/4,
    17/24)``; the momentum by the same Runge-Kutta tableau. The estimate is the difference to the
    second-order result of the first two stages (weights 1/3, 2/3: ``b1 + b2 = 1``, ``b2 c2 = 1/2``).
    Three torque evaluations and six exponentials a step."""

    order = 3
    reference = "Crouch & Grossman, J. Nonlinear Sci. 3 (1993) 1-33"
    family = "user"

    def error_order(self):
        return 2

    def step_with_error(self, system, t, state, aux, dt):
        A = ((), (3 / 4,), (119 / 216, 17 / 108))
        c = (0.0, 3 / 4, 17 / 24)
        K, F = [], []
        for i in range(3):
            R, Pi = state.R, state.Pi
            for a, k, f in zip(A[i], K, F):
                R = R @ so3.exp(dt * a * k)
                Pi = Pi + dt * a * f
            Om = Pi / system.body.J
            K.append(Om)
            F.append(jnp.cross(Pi, Om) + R.T @ system.torque(t + c[i] * dt, R, Pi))
        out = []
        for weights in ((13 / 51, -2 / 3, 24 / 17), (1 / 3, 2 / 3)):
            R, Pi = state.R, state.Pi
            for b, k, f in zip(weights, K, F):
                R = R @ so3.exp(dt * b * k)
                Pi = Pi + dt * b * f
            out.append(State(R, Pi))
        high, low = out
        return high, aux, StepStats.explicit(), pack_body(high.R, high.Pi) - pack_body(low.R, low.Pi)


def batch(p, n: int):
    """``n`` heavy tops spun between 0.5 and 1.5 times the problem's rate."""
    return State(jnp.broadcast_to(p.state0.R, (n, 3, 3)), p.state0.Pi * jnp.linspace(0.5, 1.5, n)[:, None])


def main(n: int = 64) -> dict:
    p = jaxrot.problems.get("fast_top")
    method = CrouchGrossman32()
    # the spin turns the body's x axis: the first time its world-x component falls through 0.5
    event = jaxrot.Event(lambda t, s, args: s.R[0, 0] - 0.5, direction=-1)
    kw = dict(state0=batch(p, n), t1=0.5, stepsize=jaxrot.Adaptive(rtol=1e-8, atol=1e-8), event=event)
    fused = jaxrot.simulate(method, p, executor=jaxrot.Fused(), **kw)
    xla = jaxrot.simulate(method, p, executor=jaxrot.XLA(), **kw)

    def mean_event_time(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, p.state0, p.t_end)
        return jnp.mean(jaxrot.simulate(method, q, executor=jaxrot.Fused(), **kw).event_time)

    grad = jax.grad(mean_event_time)(p.body.J)
    out = dict(executor=dict(fused.provenance)["executor"],
               max_event_time_difference=float(jnp.max(jnp.abs(fused.event_time - xla.event_time))),
               same_accepted_steps=bool(jnp.all(fused.controller.n_accepted == xla.controller.n_accepted)),
               grad_event_time_J=[float(x) for x in grad])
    print(out)
    return out


if __name__ == "__main__":
    main()
