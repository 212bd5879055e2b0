"""Checks checkpoint objects in an S3 bucket against ringload's content generator, written
in tests/py/content.py (prepended to this script) from README's description only, not from
ringload's code.

usage: checkpoint_content.py ENDPOINT BUCKET KEY SECRET PREFIX EXPECTED_JSON [RANDOMIZE [SHAPE]]
SHAPE: [dedupe_ratio, dedupe_block, compress_ratio], the layout computed here from README's
formulas (the default without).
EXPECTED_JSON: [[key, size], ...] of every object that must be there.
Prints JSON: {"listed": [[key, size], ...], "missing": [...], "unexpected": [...],
              "wrong_size": [...], "mismatches": [...], "ranges_checked": n, "bytes_checked": n,
              "open_uploads": n}
"""
import json
import random
import sys

import boto3

def expected(key, offset, length, randomize, shape):
    if not randomize:
        return bytes(length)
    return gen(key, offset, length, shape)


def main():
    endpoint, bucket, key_id, secret, prefix, expected_json = sys.argv[1:7]
    randomize = (sys.argv[7] if len(sys.argv) > 7 else "true") == "true"
    shape = shape_of(*json.loads(sys.argv[8])) if len(sys.argv) > 8 else SHAPE
    want = {k: s for k, s in json.loads(expected_json)}
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key_id,
                      aws_secret_access_key=secret, region_name="us-east-1")
    listed = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        listed += [[o["Key"], o["Size"]] for o in page.get("Contents", [])]
    have = {k: s for k, s in listed}
    out = {
        "listed": listed,
        "missing": sorted(set(want) - set(have)),
        "unexpected": sorted(set(have) - set(want)),
        "wrong_size": sorted(k for k in want if k in have and have[k] != want[k]),
        "mismatches": [],
        "ranges_checked": 0,
        "bytes_checked": 0,
    }
    rng = random.Random(7)
    for key, size in sorted(want.items()):
        if key not in have or size == 0:
            continue
        ranges = [(0, min(size, 4099)), (max(0, size - 777), min(size, 777))]
        for _ in range(3):
            off = rng.randrange(0, size)
            ranges.append((off, min(size - off, rng.randrange(1, 65536))))
        for off, length in ranges:
            body = s3.get_object(Bucket=bucket, Key=key,
                                 Range=f"bytes={off}-{off + length - 1}")["Body"].read()
            want_bytes = expected(key, off, length, randomize, shape)
            out["ranges_checked"] += 1
            out["bytes_checked"] += len(body)
            if body != want_bytes:
                at = next((i for i, (a, b) in enumerate(zip(body, want_bytes)) if a != b),
                          min(len(body), len(want_bytes)))
                out["mismatches"].append([key, off + at])
    uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
    out["open_uploads"] = len(uploads.get("Uploads", []))
    print(json.dumps(out))


main()
