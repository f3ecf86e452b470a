"""jaxrot: accurate, batched, differentiable simulation of rotating rigid bodies in JAX.

The public API, layer by layer (plotting lives in :mod:`jaxrot.present.plotting` and is never
imported here).
"""


def _as_the_command() -> bool:
    """Whether this process is the ``jaxrot`` command (the script or ``python -m jaxrot``)."""
    import os
    import sys

    argv = list(getattr(sys, "orig_argv", []))
    as_module = any(a == "-m" and b == "jaxrot" for a, b in zip(argv, argv[1:]))
    return as_module or os.path.basename(sys.argv[0]) in ("jaxrot", "jaxrot.exe")


def _exit_at_once_while_loading_as_the_command():
    """Run as the ``jaxrot`` command (the script or ``python -m jaxrot``), a Ctrl-C or SIGTERM while
    JAX loads (a second or two) ends the process with the same one line and exit code as one later; the
    command (:func:`jaxrot.present.cli.main`) then puts Python's own handler back. A handler rather
    than ``except KeyboardInterrupt``: an interrupt inside a compiled extension's initialisation
    reaches Python as an ``ImportError``. Imported as a library, nothing changes."""
    import os
    import signal
    import sys

    if not _as_the_command():
        return

    def end(signum, frame):
        what, code = ("terminated", 143) if signum == signal.SIGTERM else ("interrupted", 130)
        print(f"jaxrot: {what}; nothing was written", file=sys.stderr, flush=True)
        os._exit(code)

    end.jaxrot_loading = True  # the command replaces only this handler (not one ignoring SIGINT)

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, end)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # SIGTERM alike (143), until the command's own
        signal.signal(signal.SIGTERM, end)


_exit_at_once_while_loading_as_the_command()

import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys

#: public sub-namespaces -> the modules that hold them: ``import jaxrot.problems`` and
#: ``from jaxrot.exact import free_flow`` work, and the studies load only when first used
_ALIASES = {
    "jaxrot.so3": "jaxrot.geometry.so3",
    "jaxrot.problems": "jaxrot.physics.problems",
    "jaxrot.exact": "jaxrot.physics.exact",
    "jaxrot.torques": "jaxrot.physics.torques",
    "jaxrot.flow": "jaxrot.physics.flow",
    "jaxrot.particles": "jaxrot.physics.particles",
    "jaxrot.analysis": "jaxrot.studies.analysis",
    "jaxrot.fitting": "jaxrot.studies.fitting",
    "jaxrot.maps": "jaxrot.studies.maps",
    "jaxrot.reference": "jaxrot.studies.reference",
}


class _AliasFinder(_abc.MetaPathFinder, _abc.Loader):
    """Imports ``jaxrot.<name>`` of :data:`_ALIASES` as the module it names (the same module object)."""

    def find_spec(self, name, path=None, target=None):
        return _util.spec_from_loader(name, self) if name in _ALIASES else None

    def create_module(self, spec):
        module = _importlib.import_module(_ALIASES[spec.name])
        spec.loader_state = module.__spec__  # the import system sets __spec__ to this alias's: put it back
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _AliasFinder) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _AliasFinder())

from .version import __version__
from .geometry.body import RigidBody
from .geometry.state import State
from . import so3, exact, flow, particles, problems, torques
from .physics.problems import Problem, System
from .physics.torques import Torque
from . import integrators
from .integrators import REGISTRY, get
from .integrators.stats import StepStats
from .driver.adjoint import DirectAdjoint, ForwardMode, RecursiveCheckpointAdjoint
from .driver.checks import cast
from .driver.compiled import CompiledRun, compile
from .driver.controllers import Adaptive, Fixed
from .driver.events import Event
from .driver.executors import XLA, AbstractExecutor, CPUBlocked, Fused, Sharded
from .driver.failures import RESULTS, SimulationError, simulation_errors
from .driver.global_error import GlobalError
from .driver.loop import InvariantMonitor
from .driver.progress import TextProgressMeter, TqdmProgressMeter
from .driver.results import AdaptiveStats, Trajectory, load
from .driver.saveat import SaveAt
from .driver.sharding import gather, use_cpu_cores
from .driver.simulate import simulate
from .physics.stacking import stack_problems
from .driver.tolerance import PrecisionWarning

if not _as_the_command():  # compiled programs kept on disk for the next process (the command sets its own)
    from .present import cache as _cache

    _cache.enable_by_default()

#: loaded on first use: the studies (optax for the fits) and the deprecated spellings
_LAZY_MODULES = ("analysis", "fitting", "maps", "reference", "kernels", "studies", "present")
_LAZY_NAMES = {"suggest": "jaxrot.studies.suggest", "Suggestion": "jaxrot.studies.suggest"}
_DEPRECATED = {"simulate_batch": "simulate_batch", "final_state": "final_state",
               "simulate_adaptive": "simulate_adaptive", "simulate_to_tolerance": "simulate_to_tolerance"}


def __getattr__(name):
    if name in _LAZY_MODULES or name in _LAZY_NAMES:
        if name in _LAZY_MODULES:
            value = _importlib.import_module(f"jaxrot.{name}")
        else:
            value = getattr(_importlib.import_module(_LAZY_NAMES[name]), name)
        globals()[name] = value
        return value
    if name in _DEPRECATED or name == "PAIRS":
        from .driver import deprecated

        if name == "PAIRS":
            import warnings

            warnings.warn("jaxrot.PAIRS is deprecated: the pairs are registered methods "
                          "(jaxrot.integrators.REGISTRY, error_order set)", DeprecationWarning, stacklevel=2)
            return deprecated.pairs()
        return getattr(deprecated, name)
    raise AttributeError(f"module 'jaxrot' has no attribute {name!r}")


__all__ = [
    "__version__",
    # geometry
    "so3", "RigidBody", "State",
    # physics
    "exact", "flow", "particles", "problems", "torques", "Problem", "System", "Torque",
    # integrators
    "integrators", "REGISTRY", "get", "StepStats",
    # the driver
    "simulate", "SaveAt", "Event", "Fixed", "Adaptive", "GlobalError",
    "RecursiveCheckpointAdjoint", "ForwardMode", "DirectAdjoint", "TextProgressMeter", "TqdmProgressMeter",
    "XLA", "CPUBlocked", "Sharded", "Fused", "AbstractExecutor",
    "Trajectory", "AdaptiveStats", "load", "RESULTS", "SimulationError", "simulation_errors", "InvariantMonitor",
    "PrecisionWarning",
    "cast", "stack_problems", "compile", "CompiledRun", "gather", "use_cpu_cores",
    # studies
    "analysis", "fitting", "maps", "reference", "suggest", "Suggestion",
]
