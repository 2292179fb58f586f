"""Swap plans: which tensors go to the host, when they come back (`planner`), and the op order
that plans may enforce (`ordering`)."""
