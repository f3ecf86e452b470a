"""jaxrot: accurate, batched, differentiable simulation of rotating rigid bodies in JAX.

The public API, layer by layer (plotting lives in :mod:`jaxrot.present.plotting` and is never
imported here).
"""


def _exit_at_once_while_loading_as_the_command():
    """Run as the ``jaxrot`` command (the script or ``python -m jaxrot``), a Ctrl-C while JAX loads
    (a second or two) ends the process with the same one line and exit code as one later; the
    command (:func:`jaxrot.present.cli.main`) then puts Python's own handler back. A handler rather
    than ``except KeyboardInterrupt``: an interrupt inside a compiled extension's initialisation
    reaches Python as an ``ImportError``. Imported as a library, nothing changes."""
    import os
    import signal
    import sys

    argv = list(getattr(sys, "orig_argv", []))
    as_module = any(a == "-m" and b == "jaxrot" for a, b in zip(argv, argv[1:]))
    if not (as_module or os.path.basename(sys.argv[0]) in ("jaxrot", "jaxrot.exe")):
        return

    def end(signum, frame):
        print("jaxrot: interrupted; nothing was written", file=sys.stderr, flush=True)
        os._exit(130)

    end.jaxrot_loading = True  # the command replaces only this handler (not one ignoring SIGINT)

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, end)


_exit_at_once_while_loading_as_the_command()

from .version import __version__
from .geometry import so3
from .geometry.body import RigidBody
from .geometry.state import State
from .physics import exact, flow, particles, problems, torques
from .physics.problems import Problem, System
from .physics.torques import Torque
from . import integrators
from .integrators import REGISTRY, get
from .integrators.stats import StepStats
from .driver.adaptive import PAIRS, simulate_adaptive, simulate_to_tolerance
from .driver.checks import cast
from .driver.compiled import CompiledRun, compile
from .driver.executors import XLA, AbstractExecutor, CPUBlocked, Fused, Sharded
from .driver.failures import RESULTS, SimulationError, simulation_errors
from .driver.loop import InvariantMonitor
from .driver.results import AdaptiveStats, Trajectory, load
from .driver.saveat import SaveAt
from .driver.events import Event
from .driver.sharding import gather, use_cpu_cores
from .driver.simulate import final_state, simulate, simulate_batch, stack_problems
from .driver.stepsize import Adaptive, Fixed
from .studies import analysis, fitting, maps, reference
from .studies.suggest import Suggestion, suggest

__all__ = [
    "__version__",
    # geometry
    "so3", "RigidBody", "State",
    # physics
    "exact", "flow", "particles", "problems", "torques", "Problem", "System", "Torque",
    # integrators
    "integrators", "REGISTRY", "get", "StepStats",
    # the driver
    "simulate", "SaveAt", "Event", "Fixed", "Adaptive", "PAIRS", "XLA", "CPUBlocked", "Sharded", "Fused", "AbstractExecutor",
    "Trajectory", "AdaptiveStats", "load", "RESULTS", "SimulationError", "simulation_errors", "InvariantMonitor",
    "cast", "stack_problems", "compile", "CompiledRun", "gather", "use_cpu_cores",
    # deprecated aliases of simulate
    "simulate_batch", "final_state", "simulate_adaptive", "simulate_to_tolerance",
    # studies
    "analysis", "fitting", "maps", "reference", "suggest", "Suggestion",
]
