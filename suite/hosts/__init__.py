"""Hosts: what a host is (its description, its CPU-GPU link), the Docker engine's side of a run
in a container (docker.py, volumes.py), and the images. Which class a host of invoke.yaml is, and
how a spec runs on it: suite/dispatch/."""
