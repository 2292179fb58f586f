"""The tiny spec the host tests run (one GoogLeNet trial at 32 px: seconds), as TOML text."""

TINY = """
name = "tiny"
[defaults]
steps = 2
warmup_steps = 1
timeout = 300
[[study]]
name = "g"
kind = "throughput"
workload = "googlenet"
resolution = 32
batch = 1
"""
