"""A one-study spec the spec tests vary: `spec_with` adds to its study, its defaults or its top."""

BASE = """
name = "t"
[defaults]
steps = 5
[[study]]
name = "a"
kind = "throughput"
workload = "googlenet"
resolution = 64
batch = 2
"""


def spec_with(study_extra="", defaults_extra="", top_extra=""):
    text = BASE.replace("[defaults]\n", f"{top_extra}\n[defaults]\n{defaults_extra}\n")
    return text + study_extra
