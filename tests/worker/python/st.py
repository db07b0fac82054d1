"""Minimal safetensors reader/writer (json + numpy), so the tests need no extra package."""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
           "F16": np.float16, "U8": np.uint8, "I8": np.int8}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        arr = np.frombuffer(data[b:end], dtype=_DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = arr.copy()
    return out


def save(path, tensors):
    inv = {v: k for k, v in _DTYPES.items()}
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.array(a, order="C", copy=True)  # (ascontiguousarray would turn 0-d into 1-d)
        header[name] = {"dtype": inv[a.dtype.type], "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
