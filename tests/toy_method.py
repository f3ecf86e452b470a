"""A toy method registered by a pytest plugin (``-p tests.toy_method``): the contributing guide's
example of adding a method as one class and one registry line. Used by ``test_registry``'s check
that the generic tests enrol every registered method."""

from jaxrot import State, StepStats, so3
from jaxrot.integrators import AbstractIntegrator, register


class BodyFrameEuler(AbstractIntegrator):
    """Free rotation by the body angular velocity of the step's start: exact momentum, order 1."""

    order = 1
    conserves = ("L", "|Pi|")
    torque = False
    reference = "the contributing guide"
    family = "baseline"

    def step(self, system, t, state, aux, dt):
        E = so3.exp(dt * state.Pi / system.body.J)
        return State(state.R @ E, E.T @ state.Pi), aux, StepStats.explicit()


register("toy_euler", BodyFrameEuler, "a toy: body-frame Euler")
