"""Device and host memory over one step, simulated: the op schedule, what each tensor holds and
for how long, the allocator's chunks and padding, the peak and why it is what it is, and its
plot."""
