"""How long the pre-run artifact check takes on the default artifact, with and without stamps.

``textdp.artifact.locate.verify_artifact`` runs on the submitting machine before every job; without a
verification stamp it hashes every file the run uses (vocabulary + vectors for Madlib exact,
+ the Annoy index for --nn annoy). Measured with the files in the page cache (a machine that has
used its artifact before), stamps in a private cache directory: "hashing" deletes the stamps
before each repetition, "stamped" keeps them. Run: ``python -m benchmarks.bench_verify``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.harness import machine, write_results  # noqa: E402
from textdp.artifact.locate import read_manifest, verify_artifact
from textdp.artifact.store import ensure_default_artifact, stamp_dir  # noqa: E402
from textdp.mechanisms import artifact_needs  # noqa: E402

REPEATS = 5


def measure(artifact: str, needs: tuple) -> dict:
    manifest = read_manifest(artifact)
    names = [manifest["vocab"], manifest["vectors"]] + ([manifest["annoy"]["file"]] if "annoy" in needs else [])
    megabytes = sum(manifest["files"][name]["bytes"] for name in names) / 1e6
    verify_artifact(artifact, needs=needs)  # warm the page cache and write the stamps
    hashing, stamped = [], []
    for _ in range(REPEATS):
        shutil.rmtree(stamp_dir(), ignore_errors=True)
        began = time.perf_counter()
        verify_artifact(artifact, needs=needs)
        hashing.append(time.perf_counter() - began)
    for _ in range(REPEATS):
        began = time.perf_counter()
        verify_artifact(artifact, needs=needs)
        stamped.append(time.perf_counter() - began)
    return {"files": names, "megabytes": round(megabytes, 1),
            "hashing_s": round(statistics.median(hashing), 3), "stamped_s": round(statistics.median(stamped), 4)}


def main() -> None:
    artifact = ensure_default_artifact()  # in the user's cache; the stamps go to a private one
    with tempfile.TemporaryDirectory() as private:
        os.environ["TEXTDP_CACHE_DIR"] = private
        results = {"madlib_exact": measure(artifact, artifact_needs("madlib", "exact")),
                   "madlib_annoy": measure(artifact, artifact_needs("madlib", "annoy"))}
    payload = {"machine": machine(), "artifact": artifact, "repeats": REPEATS, "results": results}
    rows = "\n".join(f"| {run} | {r['megabytes']:,} | {r['hashing_s']:.3f} | {r['stamped_s'] * 1000:.1f} ms |"
                     for run, r in results.items())
    markdown = (f"# Pre-run artifact check (`verify_artifact`) on the default artifact\n\n"
                f"Median of {REPEATS} runs, files in the page cache; {payload['machine']['cpu']}, "
                f"load average at start {payload['machine']['loadavg_at_start'][0]:.2f}.\n\n"
                "| run | MB checked | hashing (no stamps), s | with stamps |\n|---|---|---|---|\n"
                f"{rows}\n")
    write_results("verify", payload, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
