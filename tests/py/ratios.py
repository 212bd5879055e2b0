"""Measures a file's data reduction the way the issue defines it, independently of ringload:
compression as zstandard level 1 over 128 KiB chunks (sum in / sum out), dedupe as 4 KiB blocks
over distinct SHA-256 digests.

usage: ratios.py FILE
Prints JSON: {"bytes": n, "compress_ratio": c, "dedupe_ratio": r}
"""
import hashlib
import json
import sys

import zstandard


def main():
    path = sys.argv[1]
    cctx = zstandard.ZstdCompressor(level=1)
    total = compressed = blocks = 0
    digests = set()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(128 << 10)
            if not chunk:
                break
            total += len(chunk)
            compressed += len(cctx.compress(chunk))
            for at in range(0, len(chunk), 4096):
                digests.add(hashlib.sha256(chunk[at:at + 4096]).digest())
                blocks += 1
    print(json.dumps({
        "bytes": total,
        "compress_ratio": total / max(compressed, 1),
        "dedupe_ratio": blocks / max(len(digests), 1),
    }))


main()
