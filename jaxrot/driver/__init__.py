"""The driver: checks, the time loop, results, step-size controllers and executors."""
