"""A step analysed (the graph with its function bodies' simulated peaks: `analysis`) and its
parameters tuned by binary searches over simulations (`tuner`)."""
