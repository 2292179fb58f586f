"""The two swap mechanisms behind one interface.

- `DeviceCopy` (GPU): the swap-out is a copy placed on the host device, the swap-in a copy back to
  the compute device. Only a GPU can exercise this path: on a CPU both copies are the same memory.
- `HostStore` (the emulated device, DESIGN.md §2): the swap-out hands the tensor to a Python-side
  store outside TensorFlow's allocator (through `tf.numpy_function`) and returns an int64 handle;
  the swap-in brings the array back. The allocator's measured peak really drops, so CPU tests and
  CI check LMS for real.
"""

import itertools
import threading

import numpy as np
import tensorflow as tf

ALIGNMENT = 64  # TensorFlow's buffers are 64-byte aligned (EIGEN_MAX_ALIGN_BYTES)


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """A copy of `array` in 64-byte aligned memory.

    TensorFlow wraps arrays returned by a numpy_function without copying them; kernels then take
    their aligned (vectorised) or unaligned code paths by the address, and the two round
    differently. numpy's own allocations are only 16-byte aligned, so without this the rewritten
    step's numbers would vary from run to run in the last bits (and batch norm's backward pass
    amplifies that).
    """
    raw = np.empty(array.nbytes + ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    copy = raw[offset : offset + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(copy, array)
    return copy


class SwapMechanism:
    """Make the ops of one swap inside the graph being edited."""

    name = "abstract"

    def swap_out(self, tensor, readers: int):
        """Return what the swap-ins read (a host tensor or a handle)."""
        raise NotImplementedError

    def swap_in(self, stored, like):
        """Return a device tensor equal to `like`, made from `stored`."""
        raise NotImplementedError


class DeviceCopy(SwapMechanism):
    """GPU only: copies through the host device (the CPU)."""

    name = "device-copy"

    def __init__(self, host_device: str = "/device:CPU:0"):
        self.host_device = host_device

    def swap_out(self, tensor, readers: int):
        with tf.device(self.host_device):
            return tf.identity(tensor, name="lms_swapout")

    def swap_in(self, stored, like):
        with tf.device(like.device or None):
            return tf.identity(stored, name="lms_swapin")


class HostStore(SwapMechanism):
    """The emulated device's host: arrays kept by handle, freed after their last swap-in."""

    name = "host-store"

    def __init__(self):
        self._arrays, self._readers = {}, {}
        self._lock = threading.Lock()
        self._handles = itertools.count()

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return sum(a.nbytes for a in self._arrays.values())

    def clear(self) -> None:
        """Drop whatever a failed step left behind."""
        with self._lock:
            self._arrays.clear()
            self._readers.clear()

    def _put(self, array, readers):
        handle = next(self._handles)
        with self._lock:
            # a copy: the array may alias TensorFlow's buffer, which must be freed
            self._arrays[handle] = aligned_copy(array)
            self._readers[handle] = int(readers)
        return np.int64(handle)

    def _get(self, handle):
        handle = int(handle)
        with self._lock:
            array = self._arrays[handle]
            self._readers[handle] -= 1
            if self._readers[handle] == 0:
                del self._arrays[handle], self._readers[handle]
                return array
        # TensorFlow wraps the returned array without copying, and a consumer may then write
        # into it in place (buffer forwarding): every reader but the last gets its own copy
        return aligned_copy(array)

    def swap_out(self, tensor, readers: int):
        return tf.numpy_function(
            lambda a: self._put(a, readers), [tensor], tf.int64, stateful=True, name="lms_swapout"
        )

    def swap_in(self, stored, like):
        result = tf.numpy_function(
            self._get, [stored], like.dtype, stateful=True, name="lms_swapin"
        )
        # An EnsureShape gives Grappler the static shape a py_func cannot declare: without it the
        # arithmetic optimizer rewrites the far consumers wrongly (gradients off by up to 20 %).
        return tf.ensure_shape(result, like.shape, name="lms_swapin_shape")
