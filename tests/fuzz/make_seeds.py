#!/usr/bin/env python3
"""Writes the binary seed inputs of the L2 trailer and L3 object fuzz targets into corpus/.

The formats are in tiercache/FORMAT.md; XXH3-64 comes from the system libxxhash (ctypes), HMAC-
SHA256 from Python's hmac. Run once; the output is committed (tests/fuzz/run.sh does not run it).
"""
import ctypes
import hashlib
import hmac
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
xxh = ctypes.CDLL("libxxhash.so.0")
xxh.XXH3_64bits.restype = ctypes.c_uint64
xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(b: bytes) -> int:
    return xxh.XXH3_64bits(b, len(b))


def l3_object(key: bytes, data: bytes, mac_key: bytes = b"", stored_ns: int = 1) -> bytes:
    version = 2 if mac_key else 1
    fixed = b"TFL3" + struct.pack("<IQQQ", version, len(data), xxh3(data), stored_ns) + key
    mac = hmac.new(mac_key, fixed + data, hashlib.sha256).digest() if mac_key else b""
    return fixed + mac + data


def trailer(data: bytes) -> bytes:
    chunk = 32 << 10
    return b"".join(struct.pack("<Q", xxh3(data[i:i + chunk])) for i in range(0, len(data), chunk))


def write(target: str, name: str, content: bytes) -> None:
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(content)


key = bytes(range(16))
write("l3_header_fuzz", "v1_small", l3_object(key, b"hello block"))
write("l3_header_fuzz", "v1_empty", l3_object(key, b""))
write("l3_header_fuzz", "v2_keyed", l3_object(key, b"signed bytes" * 10, b"k" * 32))
write("l3_header_fuzz", "v2_other_key", l3_object(key, b"signed bytes", b"o" * 32))
write("l3_header_fuzz", "bad_version", b"TFL3" + struct.pack("<I", 9) + bytes(40))
write("l3_header_fuzz", "huge_length", b"TFL3" + struct.pack("<IQQQ", 1, 2**64 - 1, 0, 0) + key)

# l2_trailer_fuzz input: u64 block_len, u64 offset, u64 length, then the block file (bytes +
# trailer). block_len % (file size + 1) picks the split inside the fuzz target.
for name, data, off, ln in [("one_chunk", b"x" * 1000, 10, 100),
                            ("three_chunks", bytes(range(256)) * 300, 40000, 30000),
                            ("exact_chunk", b"c" * (32 << 10), 0, 32 << 10)]:
    f = data + trailer(data)
    write("l2_trailer_fuzz", name, struct.pack("<QQQ", len(data), off, ln) + f)
write("l2_trailer_fuzz", "overflow_range",
      struct.pack("<QQQ", 4096, 2**64 - 10, 20) + b"y" * 4096 + trailer(b"y" * 4096))

# l3_listing_fuzz input: a listing payload (FORMAT.md "Shared listings"; the target wraps it in
# L3 framing). The zstd frame comes from the zstd command line tool (Debian's zstd).
import subprocess  # noqa: E402


def zstd(b: bytes) -> bytes:
    # From a file, not a pipe: the frame must carry its content size.
    import tempfile
    with tempfile.NamedTemporaryFile() as f:
        f.write(b)
        f.flush()
        return subprocess.run(["zstd", "-q", "-c", "-3", f.name], stdout=subprocess.PIPE,
                              check=True).stdout


def entry(kind: int, name: bytes, size: int = 0, mtime: int = 0, etag: bytes = b"") -> bytes:
    return (struct.pack("<BH", kind, len(name)) + name + struct.pack("<QqH", size, mtime, len(etag))
            + etag)


def listing(entries, source=b"src", dir_=b"d", listed_at=1700000000000000000) -> bytes:
    raw = b"".join(entries)
    return (b"TFLS" + struct.pack("<IIIqQQ", 1, 1, 0, listed_at, len(entries), len(raw)) +
            struct.pack("<I", len(source)) + source + struct.pack("<I", len(dir_)) + dir_ +
            zstd(raw))


write("l3_listing_fuzz", "empty", listing([]))
write("l3_listing_fuzz", "files_and_dir",
      listing([entry(1, b"a.bin", 10, 5, b"etag-a"), entry(2, b"sub"), entry(1, b"z z", 0, 7)]))
write("l3_listing_fuzz", "out_of_order", listing([entry(1, b"b", 1), entry(1, b"a", 1)]))
write("l3_listing_fuzz", "other_source", listing([entry(1, b"a", 1)], source=b"elsewhere"))
