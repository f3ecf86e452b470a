"""Studies built on the driver: error analysis, reference solutions, fitting, identification of a body
from sensor data (:mod:`~jaxrot.studies.identify`, :mod:`~jaxrot.studies.sensors`), convergence maps,
the Buss protocol."""
