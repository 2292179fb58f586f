"""Hosts: what a host is (its description), the Docker hosts trials run on, and the images."""
