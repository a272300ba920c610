"""What the Python examples share (as examples/c/common.h for the C ones)."""


def fnv1a(data) -> int:
    """FNV-1a of the bytes, as examples/c/common.h computes it."""
    h = 0xCBF29CE484222325
    for b in bytes(data):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h
