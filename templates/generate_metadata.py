"""Write ``templates/<job>/metadata.json`` from the jobs' own flag declarations, at build time.

    python templates/generate_metadata.py privatize              # before `gcloud dataflow flex-template build`
    python templates/generate_metadata.py --output-dir DIR       # every job, under DIR/<job>/metadata.json

The files are not committed: they are a function of the code and of the mechanisms installed (the
built-in ones and any registered through the ``textdp.mechanisms`` entry point group), so they are made
where the template is built (docs/scale.md's build loop runs this first). A mechanism added to the
registry then appears in the templates with no file of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from templates.jobs import JOBS, JobUnavailable, metadata, template_dir_name  # noqa: E402


def metadata_path(job: str, output_dir: str = HERE) -> str:
    return os.path.join(output_dir, template_dir_name(job), "metadata.json")


def render(job: str) -> str:
    return json.dumps(metadata(job), indent=2, ensure_ascii=False) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default=HERE, help="where <job>/metadata.json goes (default: templates/)")
    parser.add_argument("jobs", nargs="*", default=sorted(JOBS), help=f"jobs to handle (default: all of {sorted(JOBS)})")
    args = parser.parse_args(argv)
    status = 0
    for job in args.jobs:
        if job not in JOBS:
            print(f"unknown job {job!r} (expected one of {', '.join(sorted(JOBS))})", file=sys.stderr)
            status = 2
            continue
        try:
            text = render(job)
        except JobUnavailable as exc:
            print(f"skipped {job}: {exc}", file=sys.stderr)
            status = 1
            continue
        path = metadata_path(job, args.output_dir)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
