"""LMS's GPU path run for real (issue 41, item 2; ../shared/gpu-desk-check.md B1, B2, M1, M2,
Appendix B): with two logical CPU devices TensorFlow optimizes, partitions and runs a rewritten
step as it would between a GPU and its host, with real `_Send`/`_Recv` pairs for the copies.
For the suite's four workloads and five models it does not use, with a plan that swaps every
tensor it can and one that also splits an op type of the model into pieces (DeepLabV3+,
ResNet50 and MobileNetV2: that one only, for CI's time; tests/support/gpu_path_cases.py), the
tests assert from what TensorFlow ran (tests/support/_two_device_case.py):

- every LMS op planned survived Grappler and partitioning, on the device it was placed on;
- every swap-in's host-to-device send is gated by its trigger (the partition graphs), and in a
  profiled step it started after the trigger ended (an order of events, not a speed);
- every piece's host slice waits for the piece before;
- Grappler replayed on a virtual GPU with LMS's configuration keeps the plan and adds nothing;
- the step's loss and updates equal the plain step's to 1e-4 in fp32.

Negative controls show that these checks fail where the desk check said a GPU would: a swap-in
gated on the device (B1: its copy then runs before the trigger), LMS ops not kept from Grappler
(B2), TensorFlow's default Grappler configuration on a GPU (M1, M2). Two tests hold
lms.observe.placement's own verdict free of the false alarms it once gave (a trigger Grappler
removed, a first piece's read).

The models run in a few child processes, two at a time (gpu_path_cases.GROUPS), all started
before the module's first test for the tests selected. The tests that read them depend on the
CPU kernels (the plan, the graph Grappler sees): marked `kernels`, except the three heavy models'
(`inv test` runs `kernels` tests again with the other kernel set; the heavy group took 3-5 of
CI's minutes there, and what the kernels change, the plan and its graph, the other models show
on both sets). The small group's tests and the replay control are marked `compat` too.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import keras
import pytest
import tensorflow as tf
from gpu_path_cases import CONTROLS, GROUP_OF, GROUPS, run_group

from lms.observe.grappler_replay import replay

HEAVY = {"deeplabv3plus", "resnet50", "mobilenetv2"}
PLANS = [(m, k, None) for pairs in GROUPS.values() for m, k in pairs]


def _marks(key) -> list:
    model = key[0]
    marks = [pytest.mark.slow] if model in HEAVY else [pytest.mark.kernels]
    if GROUP_OF[key] == "small":
        marks.append(pytest.mark.compat)
    return marks


def _params(keys) -> list:
    return [pytest.param(key, marks=_marks(key), id="-".join(p for p in key if p)) for key in keys]


SPLIT_PLANS = [key for key in PLANS if key[1] == "split"]


class Children:
    """The child processes of the selected tests' groups, started at once and run two at a
    time, the longest first (GROUPS' order)."""

    def __init__(self, session):
        wanted = {
            GROUP_OF[key]
            for item in session.items
            if hasattr(item, "callspec")
            for key in [item.callspec.params.get("key")]
            if key in GROUP_OF
        }
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="two-device")
        self._runs = {g: self._pool.submit(run_group, g) for g in GROUPS if g in wanted}
        self._lock = threading.Lock()

    def result(self, key) -> dict:
        group = GROUP_OF[key]
        with self._lock:
            if group not in self._runs:  # not foreseen (e.g. a test run by name): start it now
                self._runs[group] = self._pool.submit(run_group, group)
        return self._runs[group].result()[key]

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module", autouse=True)
def children(request):
    """Started before the module's first test, so that the in-process ones overlap them."""
    started = Children(request.session)
    yield started
    started.close()


@pytest.fixture
def ran(children, key) -> dict:
    """What the child found for this test's (model, plan, control)."""
    return children.result(key)


def _conv_step(resolution: int, batch: int = 8, channels: int = 8):
    """A plain fp32 convolution chain's training step, traced only (never run)."""
    layers = [keras.layers.Conv2D(32, 3, padding="same", activation="relu") for _ in range(6)]
    model = keras.Sequential(
        [keras.Input((resolution, resolution, channels)), *layers]
        + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    )
    optimizer = keras.optimizers.SGD(0.01)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            )
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    return step.get_concrete_function(
        tf.TensorSpec((batch, resolution, resolution, channels)), tf.TensorSpec((batch,), tf.int32)
    )


@pytest.mark.compat
def test_grappler_defaults_on_a_gpu_add_transposes_and_swaps_lms_config_none():
    """TensorFlow's default configuration on a GPU of 128 MiB, a step of 8x512x512x8 fp32: the
    layout optimizer converts the convolutions to NCHW with transposes (M2) and the memory
    optimizer adds its own `_CopyFromGpuToHost` swaps (M1); LMS's configuration neither."""
    graph = _conv_step(512).graph
    default = replay(graph, 128 * 2**20, "default")
    assert default.transposes and default.nchw_convolutions > 0
    assert default.grappler_swaps
    configured = replay(graph, 128 * 2**20, "lms")
    assert configured.ok and configured.nchw_convolutions == 0
    assert (configured.transposes, configured.grappler_swaps) == ((), ())


@pytest.mark.parametrize("key", _params(PLANS))
def test_every_lms_op_survives_on_its_device(ran):
    assert ran["planned"] > 0, "nothing planned: the test would prove nothing"
    assert ran["missing"] == 0, f"{ran['missing']} LMS ops gone, e.g. {ran['missing_names']}"
    assert ran["misplaced"] == []
    assert ran["ran"] == ran["planned"]
    assert ran["partitions"] >= 2  # the host's and the compute device's: real send/recv pairs
    assert (ran["grappler_swaps"], ran["transposes"]) == (0, 0)


@pytest.mark.parametrize("key", _params(PLANS))
def test_every_swap_in_is_gated_by_its_trigger(ran):
    """The send that copies a swap-in to the compute device runs after the host Identity that
    waits for the trigger. Where Grappler removed the trigger (a StopGradient or Reshape it
    bypasses, a batch norm gradient's Neg it merged with its twin on the shortcut branch), the
    trigger's control edge moves with it: the gate is then the trigger's nearest kept ancestor
    or its twin (`forwarded`), which lms.observe.placement follows too (the test after the next)."""
    assert ran["swap_ins"] > 0
    assert ran["still_ungated"] == [], ran["summary"]
    assert ran["gated"] + ran["forwarded"] == ran["swap_ins"]


@pytest.mark.parametrize("key", _params(PLANS))
def test_each_swap_in_copy_starts_after_its_trigger_ended(ran):
    assert ran["timed"] == ran["swap_ins"] > 0
    assert ran["after_trigger"] == ran["timed"], f"before their trigger ended: {ran['not_after']}"


@pytest.mark.parametrize("key", _params(SPLIT_PLANS))
def test_every_piece_read_waits_for_the_piece_before(ran):
    assert ran["splits"] > 0 and ran["piece_reads"] > 0
    assert ran["piece_reads_waiting"] > 0
    assert ran["piece_reads_waiting_gated"] == ran["piece_reads_waiting"]


@pytest.mark.parametrize("key", _params([("conv3d", "split", None)]))
def test_chained_pieces_run_on_the_gpu_path(ran):
    """The conv3d model's convolutions, biases and ReLUs split chain (lms/split/chain.py): the
    checks above and below hold for a chain's pieces too, through TensorFlow's copies."""
    assert ran["chained"] >= 4, ran["chained"]


@pytest.mark.parametrize("key", _params(PLANS))
def test_grappler_on_a_gpu_keeps_the_plan(ran):
    """Replayed on a virtual GPU of 64 MiB with LMS's configuration: no LMS op removed, no
    swap of Grappler's own, no layout transpose."""
    assert ran["replay"]["lms_ops"] == ran["planned"]
    assert ran["replay"]["ok"], ran["replay"]


@pytest.mark.parametrize("key", _params(PLANS))
def test_the_step_trains_as_the_plain_step(ran):
    same = ran["equivalence"]
    assert same["variables"] > 0
    assert same["loss_relative"] <= same["rtol"], same
    assert same["mismatched"] == [] and same["moved_mismatched"] == 0, same


# -- negative controls: the same checks fail where the layout or the configuration is wrong


@pytest.mark.parametrize("key", _params([c for c in CONTROLS if c[2] == "device-swapin"]))
def test_a_swap_in_gated_on_the_device_is_caught(ran):
    """DeviceCopy's layout before the desk check (B1): the gated Identity on the compute device,
    whose `_Recv` nothing holds back."""
    assert ran["swap_ins"] > 0
    assert ran["gated"] == 0 and ran["still_ungated"] and ran["forwarded"] == 0
    assert ran["missing"] == 0  # kept: the gating is what fails
    # and the copies ran as the desk check said: the host's send to the device (the copy back)
    # right after the swap-out, not after the trigger (an order of events, not a speed)
    assert ran["copies"] > 0 and ran["copies_before_trigger"] > 0, ran["copies_sample"]


@pytest.mark.parametrize("key", _params([c for c in CONTROLS if c[2] == "unkept"]))
def test_lms_ops_not_kept_from_grappler_are_caught(ran):
    """keep_from_grappler a no-op (B2): Grappler's dependency optimizer removes swap (and
    piece) Identities that add no cross-device edge."""
    assert ran["planned"] > 0
    assert ran["missing"] > 0 and ran["ran"] < ran["planned"]


@pytest.mark.parametrize(
    "key", [pytest.param(("transformer", "swap", None), marks=[pytest.mark.kernels])]
)
def test_placement_reports_no_false_ungated_swap_in(ran):
    assert ran["stood_in"] > 0  # the case is there: triggers Grappler removed ...
    assert ran["ungated"] == []  # ... and lms.observe.placement follows their control edges


@pytest.mark.parametrize(
    "key", [pytest.param(("unet3d", "split", None), marks=[pytest.mark.kernels])]
)
def test_placement_reports_no_false_ungated_piece_read(ran):
    assert ran["piece_reads_waiting_gated"] == ran["piece_reads_waiting"]  # the real ones
    assert ran["piece_reads_gated"] == ran["piece_reads"]
