"""Write (or check) ``templates/<job>/metadata.json`` from the jobs' own flag declarations.

    python templates/generate_metadata.py            # regenerate every job that exists
    python templates/generate_metadata.py --check    # exit 1 if a committed file has drifted

Run it after changing any flag of privatize, neighbours, calibrate or build-index;
``tests/test_templates.py`` fails until the committed files match the code again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from templates.jobs import JOBS, JobUnavailable, metadata, template_dir_name  # noqa: E402


def metadata_path(job: str) -> str:
    return os.path.join(HERE, template_dir_name(job), "metadata.json")


def render(job: str) -> str:
    return json.dumps(metadata(job), indent=2, ensure_ascii=False) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on any drift")
    parser.add_argument("jobs", nargs="*", default=sorted(JOBS), help=f"jobs to handle (default: all of {sorted(JOBS)})")
    args = parser.parse_args(argv)
    status = 0
    for job in args.jobs:
        path = metadata_path(job)
        try:
            text = render(job)
        except JobUnavailable as exc:
            print(f"skipped {job}: {exc}", file=sys.stderr)
            status = 1
            continue
        if args.check:
            current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
            if current != text:
                print(f"{path} is out of date: run python templates/generate_metadata.py {job}", file=sys.stderr)
                status = 1
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
