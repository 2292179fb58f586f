"""How `lms` is laid out, in numbers a reader can compare between two checkouts (issue 42): its
modules, their median and largest size in lines, how many are over 400 lines, and every private
name one lms file uses of another (what a newcomer cannot change in one place). Static: nothing
is imported or run.

    python benchmarks/lms_layout.py [--root CHECKOUT]   # default: this checkout
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from layers import package_files, private_crossings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    root = parser.parse_args().root.resolve()
    files = package_files(root, "lms")
    sizes = [len(path.read_text().splitlines()) for path in files]
    folders = {path.parent for path in files} - {root / "lms"}
    print(
        f"{root}: {len(files)} modules in {len(folders)} folders; lines median "
        f"{statistics.median(sizes):g}, max {max(sizes)}; over 400: {sum(s > 400 for s in sizes)}"
    )
    crossings = private_crossings(files)
    print(f"private names used across lms files: {len(crossings)}")
    for path, what in crossings:
        print(f"  {path.relative_to(root)}: {what}")


if __name__ == "__main__":
    main()
