"""A traced training step as the planner and simulator see it: ops, tensor sizes, buffers and
aliases (`step`), what TensorFlow's graph passes do before it runs (`passes`), what loops keep
(`loops`), and what each op's kernel holds besides its inputs and outputs (`kernels`,
`cpu_host`)."""
