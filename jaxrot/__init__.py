"""jaxrot: accurate, batched, differentiable simulation of rotating rigid bodies in JAX.

The public API (plotting lives in :mod:`jaxrot.present.plotting` and is never imported here).
"""

from .studies import analysis, fitting, maps, reference
from .physics import exact, flow, particles, problems, torques
from . import integrators
from .version import __version__
from .geometry import so3
from .driver.adaptive import PAIRS, AdaptiveTrajectory, simulate_adaptive, simulate_to_tolerance
from .geometry.body import RigidBody
from .driver.compiled import CompiledRun, compile
from .integrators import REGISTRY, get
from .physics.problems import Problem, System
from .physics.torques import Torque
from .driver.simulate import (RESULTS, InvariantMonitor, SimulationError, cast, final_state, simulate, simulate_batch,
                       simulation_errors, stack_problems)
from .driver.sharding import gather, use_cpu_cores
from .geometry.state import State
from .integrators.stats import StepStats
from .driver.results import Trajectory, load


__all__ = [
    "analysis",
    "fitting",
    "maps",
    "particles",
    "exact",
    "flow",
    "integrators",
    "problems",
    "reference",
    "so3",
    "torques",
    "RigidBody",
    "REGISTRY",
    "get",
    "System",
    "Torque",
    "gather",
    "use_cpu_cores",
    "simulate_adaptive",
    "simulate_to_tolerance",
    "simulation_errors",
    "compile",
    "CompiledRun",
    "AdaptiveTrajectory",
    "PAIRS",
    "Problem",
    "SimulationError",
    "RESULTS",
    "InvariantMonitor",
    "simulate",
    "simulate_batch",
    "final_state",
    "cast",
    "stack_problems",
    "State",
    "StepStats",
    "Trajectory",
    "load",
]
