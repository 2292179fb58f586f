import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The emulated device: TensorFlow's CPU allocator keeps statistics only with BFC. Set before any
# test imports TensorFlow (the suite sets it for its own trial processes).
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
