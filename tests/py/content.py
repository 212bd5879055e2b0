# ringload's content generator, version 2, written from README's description of the algorithm
# (not from ringload's code), with numpy: gen(key, offset, n, shape) is the object's bytes
# offset..offset+n. shape = (block, random, unique, group) as README defines them; SHAPE is the
# default (4096-byte blocks, all random, no dedupe). Prepended to the scripts that use it.
import math

import numpy as np

M = (1 << 64) - 1
SHAPE = (4096, 4096, 256, 256)


def fnv(key):
    h = 0xcbf29ce484222325
    for b in key.encode():
        h = ((h ^ b) * 0x100000001b3) & M
    return h


def word(s, i):
    """splitmix64's finalizer of s ^ i*gamma, over a numpy uint64 array i."""
    with np.errstate(over="ignore"):
        z = np.uint64(s) ^ (i.astype(np.uint64) * np.uint64(0x9e3779b97f4a7c15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        return z ^ (z >> np.uint64(31))


def half_up(x):
    """README's rounding: halves up (Python's round() takes halves to even)."""
    return int(math.floor(x + 0.5))


def shape_of(dedupe_ratio=1.0, block=4096, compress_ratio=1.0):
    unique = max(256, (1 << 20) // block)
    random = min(max(half_up(block / compress_ratio), 16), block)
    return (block, random, unique, max(unique, half_up(dedupe_ratio * unique)))


def blocks(seed, ids, random):
    """The random bytes of source blocks ids (each random bytes long), as a 2-d uint8 array."""
    ids = np.asarray(ids, dtype=np.uint64)
    words = (random + 7) // 8
    steps = (words + 7) // 8
    lanes = np.arange(8, dtype=np.uint64)
    base = ids[:, None] * np.uint64(16) + np.uint64(2) * lanes[None, :]
    key = seed ^ 0x5851f42d4c957f2d
    a = word(key, base)
    b = word(key, base + np.uint64(1)) | np.uint64(1)
    out = np.empty((len(ids), steps * 8), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for t in range(steps):
            s1, s0 = a, b
            a = s0
            s1 = s1 ^ (s1 << np.uint64(23))
            b = s1 ^ s0 ^ (s1 >> np.uint64(17)) ^ (s0 >> np.uint64(26))
            out[:, 8 * t:8 * t + 8] = b + s0
    out[:, 0] = word(seed, ids)
    return out.astype("<u8").view(np.uint8)[:, :random]


def gen(key, offset, n, shape=SHAPE):
    if n <= 0:
        return b""
    block, random, unique, group = shape
    first, last = offset // block, (offset + n - 1) // block
    b = np.arange(first, last + 1, dtype=np.uint64)
    ids = (b // np.uint64(group)) * np.uint64(unique) + (b % np.uint64(group)) % np.uint64(unique)
    whole = np.zeros((len(ids), block), dtype=np.uint8)
    whole[:, :random] = blocks(fnv(key), ids, random)
    start = offset - first * block
    return whole.tobytes()[start:start + n]
