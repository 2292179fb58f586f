"""The old home of the swap mechanisms' names, kept only so that the modules that still import
them from here go on working until they import them from their modules (lms/device/copies.py
`DeviceCopy`; lms/device/host_store.py `HostStore`, `Traffic`, `aligned_copy`, `aligned_empty`;
lms/device/nodes.py `node`, `type_attr`, `type_list_attr`): lms/function.py (`Traffic`) and
tests/support/_two_device_case.py (`DeviceCopy`, `node`, `type_attr`). Nothing new imports from
here; remove it with their last import."""

from lms.device.copies import DeviceCopy
from lms.device.host_store import HostStore, Traffic, aligned_copy, aligned_empty
from lms.device.nodes import node, type_attr, type_list_attr

__all__ = [
    "DeviceCopy",
    "HostStore",
    "Traffic",
    "aligned_copy",
    "aligned_empty",
    "node",
    "type_attr",
    "type_list_attr",
]
