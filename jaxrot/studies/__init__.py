"""Studies built on the driver: error analysis, reference solutions, fitting, convergence maps, the Buss protocol."""
