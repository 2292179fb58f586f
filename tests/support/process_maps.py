"""Whether an address lies in one of this process's memory mappings (/proc/self/maps): how a test
sees that a region was given back to the host (unmapped), which the process's RSS, moved by
other threads of a long test run, cannot show reliably."""


def mapped(address: int) -> bool:
    with open("/proc/self/maps") as maps:
        for line in maps:
            start, stop = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= address < stop:
                return True
    return False
