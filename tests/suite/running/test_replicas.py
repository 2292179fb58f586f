"""A data-parallel trial's pieces that need no TensorFlow: where a worker runs (placement) and
how the workers' results merge into the trial's (the whole launcher runs in
tests/suite/running/test_trial_worker.py and, under Slurm, tests/system/test_slurm_nodes.py)."""

import socket

from suite.records import Metrics, Placement, Rate, TrialResult
from suite.running.replicas import merge, placement, tf_config


def test_a_worker_knows_its_node_and_address():
    environ = {
        "TF_CONFIG": tf_config(["127.0.0.1:20384", "127.0.0.1:20385"], 1),
        "SLURMD_NODENAME": "node2",
        "SLURM_NODEID": "1",
    }
    assert placement(environ) == Placement(socket.gethostname(), "node2", 1, "127.0.0.1:20385")
    assert placement(environ).text() == f"node2 (host {socket.gethostname()}, 127.0.0.1:20385)"
    # not a worker, not under Slurm; a TF_CONFIG that is not a worker's is ignored, not fatal
    assert placement({}) == Placement(socket.gethostname())
    assert placement({"TF_CONFIG": "{not json"}).address is None


def test_the_failing_workers_account_comes_first_and_names_its_node():
    failed = TrialResult(
        "crashed",
        Metrics(placement=Placement("vm", "node2", 1)),
        "ClusterError: port 26129 on node node2 (vm) is in use",
    )
    merged = merge([None, failed], [None, None])
    assert merged.outcome == "crashed"
    assert merged.error == (
        "worker 1 on node2: ClusterError: port 26129 on node node2 (vm) is in use; "
        "worker 0: left no result"
    )
    # worker 0 left nothing, yet every worker's summary is kept
    assert [w.outcome for w in merged.metrics.workers] == ["crashed", "crashed"]
    assert merged.metrics.workers[1].placement.node == "node2"


def test_a_local_workers_exit_code_is_said_when_it_left_no_result():
    ok = TrialResult("ok", Metrics(images_per_sec=Rate(9.0, 0.1), final_loss=1.5))
    merged = merge([ok, None], [0, -9])
    assert merged.error == "worker 1: exited with code -9 without a result"
    assert merged.metrics.final_loss == 1.5
