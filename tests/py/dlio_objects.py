"""Writes a whole-object training dataset into an S3 bucket as DLIO's generators write it
(reference part B2), independently of ringload: numpy seeded once with 10, file after file two
normals d1, d2 = max(int(N(d, sigma)), 1) with d = floor(sqrt(L)), sigma = stdev / (2 sqrt(L));
npz through numpy.savez (x: uint8 (d1, d2, spf), y: [0] * spf), jpeg as the DLIO fork
writes them for object storage (d1 * d2 raw random bytes). Names
<prefix>img_<i zero-padded to len(str(N))>_of_<N>.<fmt>.

usage: dlio_objects.py ENDPOINT BUCKET KEY SECRET PREFIX FORMAT FILES RECORD_LENGTH STDEV SPF
Prints JSON: {"objects": [[key, size], ...], "shapes": [[d1, d2], ...]}
"""
import io
import json
import math
import sys

import boto3
import numpy as np
from botocore.config import Config

endpoint, bucket, key, secret, prefix, fmt = sys.argv[1:7]
files, record_length, stdev, spf = (int(sys.argv[7]), float(sys.argv[8]),
                                    float(sys.argv[9]), int(sys.argv[10]))
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                  aws_secret_access_key=secret, region_name="us-east-1",
                  config=Config(retries={"total_max_attempts": 3}))
np.random.seed(10)
d = int(math.sqrt(record_length))
sigma = stdev / (2 * math.sqrt(record_length)) if record_length > 0 else 0.0
width = len(str(files))
objects, shapes = [], []
for i in range(files):
    if sigma > 0:
        d1 = max(int(np.random.normal(d, sigma)), 1)
        d2 = max(int(np.random.normal(d, sigma)), 1)
    else:
        d1 = d2 = d
    records = np.random.randint(255, size=(d1, d2, spf), dtype=np.uint8)
    if fmt == "npz":
        out = io.BytesIO()
        np.savez(out, x=records, y=[0] * spf)  # DLIO: record_labels = [0] * num_samples
        body = out.getvalue()
    elif fmt == "jpeg":
        body = records.tobytes()
    else:
        sys.exit(f"dlio_objects.py: format {fmt!r} is not written here (npz, jpeg)")
    name = f"{prefix}img_{i:0{width}d}_of_{files}.{fmt}"
    s3.put_object(Bucket=bucket, Key=name, Body=body)
    objects.append([name, len(body)])
    shapes.append([d1, d2])
print(json.dumps({"objects": objects, "shapes": shapes}))
