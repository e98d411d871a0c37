#!/usr/bin/env python3
"""The conditions a benchmark ran under, as one JSON object for its results file.

Usage (from a benchmark script):
    python3 tests/bench/conditions.py [--path DIR] [--page-cache warm|cold|none]
                                      [--flush "included ..."|"excluded ..."] [--note TEXT]

Prints {"cpu", "arch", "cpu_features", "cores", "kernel", "thermal", "loadavg_1min", and, with --path, "filesystem"
(statfs f_type of DIR, by name), "page_cache" and "flush"}. Every storage measurement must say
whether the page cache was warm or cold (cold: posix_fadvise(DONTNEED) after fsync) and whether
the storage flush (fsync) is inside the timed part; tests/bench/claims.py refuses a storage
claim whose filesystem is tmpfs.

As a module: conditions(path=None, page_cache=None, flush=None) returns the same dict.
"""

import argparse
import ctypes
import ctypes.util
import glob
import json
import os
import platform

# statfs(2) f_type values (linux/magic.h) of the filesystems a device or a CI machine has.
FS_MAGIC = {
    0xEF53: "ext4",  # ext2/ext3/ext4 share the magic
    0x01021994: "tmpfs",
    0x9123683E: "btrfs",
    0x58465342: "xfs",
    0x794C7630: "overlayfs",
    0xF2F52010: "f2fs",
    0x4D44: "vfat",
    0x6969: "nfs",
    0x73717368: "squashfs",
    0x858458F6: "ramfs",
    0x65735546: "fuse",
    0x2FC12FC1: "zfs",
}

# Arm capabilities that matter to the kernels (hash, quantizers), as /proc/cpuinfo names them.
ARM_FEATURES = ("asimd", "sha2", "sha512", "asimddp", "i8mm", "sve", "sve2", "sme", "bf16", "fphp", "asimdhp")
X86_FEATURES = ("sse4_1", "avx", "avx2", "fma", "f16c", "sha_ni", "avx512f", "avx512bw", "avx512vl")


class _Statfs(ctypes.Structure):
    # struct statfs on 64-bit Linux: f_type is the first long.
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112)]


def filesystem(path):
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    buf = _Statfs()
    if libc.statfs(os.fsencode(path), ctypes.byref(buf)) != 0:
        raise OSError(ctypes.get_errno(), f"statfs {path}")
    magic = buf.f_type & 0xFFFFFFFF
    return FS_MAGIC.get(magic, f"0x{magic:x}")


def _cpuinfo():
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model(info):
    for key in ("model name", "Model", "Hardware"):
        if key in info:
            return info[key]
    if "CPU part" in info:  # Arm without a model name: implementer/part, e.g. 0x41/0xd0b = Cortex-A76
        return f"arm implementer {info.get('CPU implementer', '?')} part {info['CPU part']}"
    return platform.processor() or "unknown"


def cpu_features(info):
    flags = set((info.get("flags") or info.get("Features") or "").split())
    wanted = ARM_FEATURES if platform.machine() in ("aarch64", "arm64") else X86_FEATURES
    return [f for f in wanted if f in flags]


def thermal():
    """Each thermal zone's type and reading in degrees C; empty where /sys has none (VMs)."""
    zones = {}
    for zone in sorted(glob.glob("/sys/class/thermal/thermal_zone*")):
        try:
            with open(os.path.join(zone, "type")) as f:
                name = f.read().strip()
            with open(os.path.join(zone, "temp")) as f:
                zones[f"{os.path.basename(zone)}:{name}"] = int(f.read().strip()) / 1000.0
        except (OSError, ValueError):
            continue
    return zones


def conditions(path=None, page_cache=None, flush=None, note=None):
    info = _cpuinfo()
    out = {
        "cpu": cpu_model(info),
        "arch": platform.machine(),
        "cpu_features": cpu_features(info),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "thermal": thermal(),
        "loadavg_1min": round(os.getloadavg()[0], 2),  # other work on the machine while measuring
    }
    if path is not None:
        out["filesystem"] = filesystem(path)
    if page_cache is not None:
        out["page_cache"] = page_cache
    if flush is not None:
        out["flush"] = flush
    if note:
        out["note"] = note
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", help="directory the measured files live in (its filesystem is recorded)")
    ap.add_argument("--page-cache", choices=("warm", "cold", "none"), help="page cache state of the timed reads")
    ap.add_argument("--flush", help='whether fsync is inside the timed part ("included ...", "excluded ...")')
    ap.add_argument("--note", help="anything else a reader needs to judge the numbers")
    a = ap.parse_args()
    print(json.dumps(conditions(a.path, a.page_cache, a.flush, a.note), indent=2))


if __name__ == "__main__":
    main()
