"""The benchmark workloads: metadata here (no TensorFlow import), builders in one module each.

`WORKLOADS` is what specs validate against; `build_workload` imports TensorFlow and returns a
Keras model plus its loss for (resolution, batch, precision, classes).
"""

import contextlib
import importlib
from dataclasses import dataclass

from suite.errors import SuiteError

PRECISIONS = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}
# Real-data TFRecord formats and the kind of labels each provides (see suite.workloads.data).
DATA_FORMATS = {"imagenet": "class", "voc": "mask"}


@dataclass(frozen=True)
class WorkloadInfo:
    """What the suite must know about a workload without building it."""

    name: str
    title: str
    module: str  # suite.workloads.<module> holds build(resolution, batch, classes) and loss
    spatial_dims: int  # 2: images (pixels), 3: volumes (voxels)
    channels: int
    default_classes: int
    labels: str  # "class": one id per sample, "mask": one id per pixel, "multilabel": 0/1 per voxel
    resolution_multiple: int  # resolutions must be multiples of this (strided layers)
    min_resolution: int
    reference_resolution: int  # the seed's size, or the usual one (`inv models` default)

    def check_resolution(self, resolution: int) -> str | None:
        """Return why `resolution` is invalid for this workload, or None."""
        if resolution < self.min_resolution:
            return f"at least {self.min_resolution} for {self.name}"
        if resolution % self.resolution_multiple:
            return f"a multiple of {self.resolution_multiple} for {self.name}"
        return None

    def data_formats(self) -> list[str]:
        """The real-data formats this workload can train on (none for 3D volumes)."""
        if self.spatial_dims != 2:
            return []
        return [fmt for fmt, labels in DATA_FORMATS.items() if labels == self.labels]

    def elements_per_sample(self, resolution: int) -> int:
        """Pixels (2D) or voxels (3D) per sample: the unit of pixels/sec and voxels/sec."""
        return resolution**self.spatial_dims

    # The one place that chooses between pixels and voxels: records, tables and plots ask here.
    @property
    def element(self) -> str:
        """ "pixels" for images, "voxels" for volumes."""
        return "voxels" if self.spatial_dims == 3 else "pixels"

    @property
    def rate_key(self) -> str:
        """The metric of a trial record holding elements per second."""
        return f"{self.element}_per_sec"

    @property
    def rate_unit(self) -> str:
        return f"M{self.element}/sec"

    @property
    def side_label(self) -> str:
        return "cube side (voxels)" if self.spatial_dims == 3 else "image side (pixels)"


WORKLOADS = {
    w.name: w
    for w in (
        WorkloadInfo(
            "googlenet",
            "Enlarged GoogLeNet (Inception v1)",
            "googlenet",
            2,
            3,
            1001,
            "class",
            1,
            32,
            2240,
        ),
        WorkloadInfo(
            "deeplabv3plus", "DeepLabV3+ / Xception-65", "deeplab", 2, 3, 21, "mask", 1, 64, 513
        ),
        WorkloadInfo(
            "resnet50", "ResNet50 (keras.applications)", "resnet50", 2, 3, 1000, "class", 1, 32, 224
        ),
        WorkloadInfo(
            "unet3d", "3D U-Net (depth 4, 32 filters)", "unet3d", 3, 4, 3, "multilabel", 8, 16, 144
        ),
    )
}


def get_workload(name: str) -> WorkloadInfo:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise SuiteError(
            f"unknown workload {name!r}; choose one of: {', '.join(sorted(WORKLOADS))}"
        ) from None


@contextlib.contextmanager
def precision_policy(precision: str):
    """Set Keras' global dtype policy for the layers built inside, then restore it."""
    import keras

    if precision not in PRECISIONS:
        raise SuiteError(f"unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(PRECISIONS[precision])
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def build_workload(
    name: str, resolution: int, batch: int, precision: str = "fp32", classes: int | None = None
):
    """Build workload `name`: returns (keras.Model, loss(labels, outputs) -> scalar float32).

    The model's input has a static batch dimension so that every tensor of the training step has
    a static size (what LMS plans with). Outputs may be float16 under mixed precision; the losses
    compute in float32.
    """
    info = get_workload(name)
    problem = info.check_resolution(resolution)
    if problem:
        raise SuiteError(f"resolution {resolution} is invalid: it must be {problem}")
    if batch < 1:
        raise SuiteError(f"batch {batch} is invalid: it must be at least 1")
    module = importlib.import_module(f"suite.workloads.{info.module}")
    with precision_policy(precision):
        model = module.build(resolution, batch, classes or info.default_classes)
    return model, module.loss
