"""jaxrot: accurate, batched, differentiable simulation of rotating rigid bodies in JAX.

The public API (plotting lives in :mod:`jaxrot.plotting` and is never imported here).
"""

from . import analysis, exact, flow, integrators, problems, reference, so3, torques
from .adaptive import PAIRS, AdaptiveTrajectory, simulate_adaptive, simulate_to_tolerance
from .body import RigidBody
from .compiled import CompiledRun, compile
from .integrators import REGISTRY, get
from .problems import Problem, System
from .simulate import (RESULTS, InvariantMonitor, SimulationError, cast, final_state, simulate, simulate_batch,
                       simulation_errors, stack_problems)
from .sharding import gather, use_cpu_cores
from .state import State, StepStats, Trajectory, load

__version__ = "0.1.0"

__all__ = [
    "analysis",
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
