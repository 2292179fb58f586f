"""Running a spec on this host: trial processes, the executor that records them, sweeps, limit
searches and the simulator's predictions."""
