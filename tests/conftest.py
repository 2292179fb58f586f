import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The emulated device: TensorFlow's CPU allocator keeps statistics only with BFC. Set before any
# test imports TensorFlow (the suite sets it for its own trial processes).
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run where TensorFlow sees a GPU and are skipped elsewhere (here)."""
    import pytest

    marked = [item for item in items if item.get_closest_marker("gpu")]
    if not marked:
        return
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        skip = pytest.mark.skip(reason="needs a GPU (TensorFlow sees none)")
        for item in marked:
            item.add_marker(skip)
