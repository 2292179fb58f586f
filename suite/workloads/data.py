"""Input data for trials: synthetic tensors made once on the device (tf_cnn_benchmarks' way: no
input-pipeline cost), or real TFRecords read with tf.data and resized to the workload's resolution.

Real formats (the feature keys of the public converters):
- "imagenet": `image/encoded` (JPEG/PNG), `image/class/label` (int64; 1..1000, 0 = background,
  hence 1001 classes in GoogLeNet).
- "voc": DeepLab's PASCAL VOC records: `image/encoded`, `image/segmentation/class/encoded` (PNG of
  class ids, 255 = ignore).
"""

import glob
import os

import numpy as np
import tensorflow as tf

from suite.errors import SuiteError
from suite.workloads import DATA_FORMATS, WorkloadInfo


def synthetic_batch(info: WorkloadInfo, resolution: int, batch: int, classes: int, seed: int = 0):
    """One batch of random images and labels, generated once and reused every step."""
    rng = tf.random.Generator.from_seed(seed)
    spatial = (resolution,) * info.spatial_dims
    images = rng.uniform((batch, *spatial, info.channels), dtype=tf.float32)
    if info.labels == "class":
        labels = rng.uniform((batch,), maxval=classes, dtype=tf.int32)
    elif info.labels == "mask":
        labels = rng.uniform((batch, *spatial), maxval=classes, dtype=tf.int32)
    else:  # multilabel: one binary map per label
        labels = tf.cast(rng.uniform((batch, *spatial, classes)) > 0.5, tf.float32)
    return images, labels


def batch_specs(info: WorkloadInfo, resolution: int, batch: int, classes: int):
    """TensorSpecs of (images, labels) as synthetic_batch and the TFRecord pipelines make them:
    for tracing a step without data (planning at full size)."""
    spatial = (resolution,) * info.spatial_dims
    images = tf.TensorSpec((batch, *spatial, info.channels), tf.float32)
    if info.labels == "class":
        labels = tf.TensorSpec((batch,), tf.int32)
    elif info.labels == "mask":
        labels = tf.TensorSpec((batch, *spatial), tf.int32)
    else:
        labels = tf.TensorSpec((batch, *spatial, classes), tf.float32)
    return images, labels


def tfrecord_files(path: str) -> list[str]:
    """The TFRecord files a data path names: a file, a glob, or a directory of *.tfrecord*."""
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "*.tfrecord*")))
    else:
        files = sorted(glob.glob(path))
    if not files:
        raise SuiteError(
            f"no TFRecord files at {path!r} (a file, a glob, or a directory of *.tfrecord* files)"
        )
    return files


def tfrecord_dataset(info: WorkloadInfo, fmt: str, path: str, resolution: int, batch: int):
    """An endless, batched, prefetched tf.data pipeline of (images, labels) at `resolution`."""
    if fmt not in info.data_formats():
        raise SuiteError(
            f"workload {info.name} cannot read {fmt!r} records; formats for it: "
            f"{info.data_formats() or 'none'}"
        )
    size = (resolution, resolution)

    def parse(serialized):
        features = {"image/encoded": tf.io.FixedLenFeature([], tf.string)}
        if fmt == "imagenet":
            features["image/class/label"] = tf.io.FixedLenFeature([], tf.int64)
        else:
            features["image/segmentation/class/encoded"] = tf.io.FixedLenFeature([], tf.string)
        example = tf.io.parse_single_example(serialized, features)
        image = tf.io.decode_image(example["image/encoded"], channels=3, expand_animations=False)
        image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, size)
        if fmt == "imagenet":
            return image, tf.cast(example["image/class/label"], tf.int32)
        mask = tf.io.decode_png(example["image/segmentation/class/encoded"], channels=1)
        mask = tf.image.resize(mask, size, method="nearest")
        return image, tf.cast(tf.squeeze(mask, -1), tf.int32)

    dataset = tf.data.TFRecordDataset(tfrecord_files(path), num_parallel_reads=tf.data.AUTOTUNE)
    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE).repeat()
    return dataset.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _bytes_feature(value: bytes):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _encode(array: np.ndarray, png: bool) -> bytes:
    return (tf.io.encode_png(array) if png else tf.io.encode_jpeg(array)).numpy()


def write_tfrecords(
    path: str, fmt: str, count: int, size: int = 64, classes: int = 21, seed: int = 0
) -> str:
    """Write `count` random examples in format `fmt` to the TFRecord file `path`.

    For tests and for trying the real-data path without a dataset; the layout is the public one.
    """
    if fmt not in DATA_FORMATS:
        raise SuiteError(
            f"unknown TFRecord format {fmt!r}; choose one of: {', '.join(DATA_FORMATS)}"
        )
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(count):
            image = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            feature = {"image/encoded": _bytes_feature(_encode(image, png=False))}
            if fmt == "imagenet":
                label = int(rng.integers(1, classes))
                feature["image/class/label"] = tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[label])
                )
            else:
                mask = rng.integers(0, classes, (size, size, 1), dtype=np.uint8)
                mask[0, :] = 255  # an ignored border row, as in VOC
                feature["image/segmentation/class/encoded"] = _bytes_feature(_encode(mask, True))
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    return path


__all__ = ["synthetic_batch", "tfrecord_dataset", "tfrecord_files", "write_tfrecords"]
