"""What LMS says about the CPU kernels it models less well (the device itself: lms/target.py)."""

# Eigen's kernels (TF_ENABLE_ONEDNN_OPTS=0, CPUs without AVX-512, aarch64 under qemu) are
# modelled (lms/kernels.py): GoogLeNet 96x96 b2 everything swapped, measured / simulated went
# from 1.85-1.90x to 0.92-1.01x (benchmarks/cpu_kernels_peak.py; oneDNN 1.07-1.10x). Left: their
# gradients' 25-30 MiB buffers (3D: up to 25x their tensors) make the peak in TensorFlow's own
# order depend on which two run side by side and where the allocator puts them: the 3D U-Net
# 16^3 b2, everything swapped in that order, measured 294-441 MiB against 319-327 simulated.
EIGEN_KERNELS_WARNING = (
    "This TensorFlow computes on the CPU with Eigen's kernels, not oneDNN's: LMS models their "
    "convolution gradients' working-set buffers, but in TensorFlow's own order which of them "
    "coincide varies between processes, so the device peak can exceed the plan's by up to "
    "~35 % (3D U-Net 16^3); leave margin with safety_ratio, let LMS enforce its order "
    "(ordering=1), or enable oneDNN"
)
