import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The emulated device: TensorFlow's CPU allocator keeps statistics only with BFC. Set before any
# test imports TensorFlow (the suite sets it for its own trial processes).
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
# The tests mean the emulated device (and the two-device mode, which stands in for a GPU): on a
# GPU host, lms's "auto" would take the GPU's mechanism, its budget and its meter unasked, and so
# would every trial process the tests start. So GPUs are hidden from this process and its
# children, before TensorFlow starts. `inv test` runs the `gpu`-marked tests in a second session
# with LMS_TEST_GPU=1, where the GPU stays visible and nothing else runs.
GPU_SESSION = os.environ.get("LMS_TEST_GPU") == "1"
if not GPU_SESSION:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run only in the GPU session (LMS_TEST_GPU=1) where TensorFlow sees a
    GPU, and every other test only outside it: each session runs what it means to."""
    import pytest

    marked = [item for item in items if item.get_closest_marker("gpu")]
    if GPU_SESSION:
        skip = pytest.mark.skip(reason="the GPU session (LMS_TEST_GPU=1) runs gpu tests only")
        for item in items:
            if not item.get_closest_marker("gpu"):
                item.add_marker(skip)
    if not marked:
        return
    import tensorflow as tf

    if not GPU_SESSION or not tf.config.list_physical_devices("GPU"):
        why = (
            "GPUs are hidden outside the GPU session" if not GPU_SESSION else "TensorFlow sees none"
        )
        skip = pytest.mark.skip(
            reason=f"needs a GPU ({why}; inv test runs them where there is one)"
        )
        for item in marked:
            item.add_marker(skip)
