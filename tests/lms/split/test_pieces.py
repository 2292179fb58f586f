"""lms/split/pieces.py: every layout split_op splits by has the members `PieceLayout` names
(halo.py's RowLayout and views.py's included), and `split_axis` takes the batch, else the rows."""

from lms.split.halo import RowLayout, Window
from lms.split.pieces import Layout, PieceLayout, split_axis
from lms.split.views import ReductionLayout, ShiftLayout

MEMBERS = {name for name in vars(PieceLayout) if not name.startswith("_")}


def test_every_piece_layout_has_the_members_split_op_uses():
    want = {"axis", "length", "kept", "combine", "read_axis", "store_rows", "piece", "reads"}
    assert want == MEMBERS
    window = Window(size_in=9, size_out=9, extent=3, stride=1, before=1)
    layouts = [
        Layout(1, 6, ("slice", "whole"), "assemble", read_axis=3, store_rows=2),
        ShiftLayout(1, 6, -2, 4),
        ReductionLayout(0, 4),
        RowLayout("forward", (window,), (0,), "assemble"),
    ]
    for found in layouts:
        missing = [name for name in MEMBERS if not hasattr(found, name)]
        assert not missing, (type(found).__name__, missing)
    assert [(f.read_axis, f.store_rows) for f in layouts] == [(3, 2), *[(None, 1)] * 3]
    assert layouts[0].kept == (0,) and layouts[3].length == 9


def test_split_axis_is_the_batch_else_the_rows():
    assert split_axis([4, 1, 8, 3]) == 0
    assert split_axis([1, 16, 8, 3]) == 1
    assert split_axis([1, 1, 8, 3]) is None
    assert split_axis([1, 16]) is None  # no rows: a matrix of one row
