"""Physics: torques, problems (body + torque + scenario), vector fields, the exact free flow, particle models."""
