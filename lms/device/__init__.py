"""The device a step runs on and how LMS moves bytes there: the target (worked out once), the swap
and piece mechanisms per device kind, the host's memory, and the rewrite that puts a plan into
the step's graph."""
