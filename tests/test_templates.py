"""Dataflow Flex Templates: metadata derived from the jobs' flags, the launcher entry point, the image.

Every job's metadata.json is generated at build time from its PipelineOptions class (or argparse
parser) and the installed mechanisms (``templates/generate_metadata.py``, run by docs/scale.md's build
loop before ``gcloud dataflow flex-template build``): the tests generate it into a temporary directory
and check it against the job's own flags and ``--help``. Docker
cannot run on this machine, so the Dockerfile is checked as text (same Beam and Python as the
project, launcher binary copied, entry point present); the entry point itself is run here, on
the local runner and as a DataflowRunner dry run against the GCS emulator.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import re

import pytest

from templates import jobs
from templates import main as template_main
from tests.gcs_emulator import beam_gcs_anonymous, gcs_bucket, gcs_emulator  # noqa: F401 (pytest fixtures)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = os.path.join(REPO, "templates")
EXAMPLE_TXT = os.path.join(REPO, "examples", "reviews.txt")
NIGHT = datetime.datetime(2026, 11, 22, 2, 30, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The metadata files as the build writes them (templates/generate_metadata.py), under a temporary directory."""
    from templates import generate_metadata

    out = tmp_path_factory.mktemp("template-specs")
    assert generate_metadata.main(["--output-dir", str(out)]) == 0
    return str(out)


def committed_metadata(job, directory):
    path = os.path.join(directory, jobs.template_dir_name(job), "metadata.json")
    assert os.path.exists(path), f"templates/generate_metadata.py wrote no {path}"
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@pytest.mark.parametrize("job", sorted(jobs.JOBS))
def test_the_generator_writes_each_jobs_metadata_from_its_flags(job, generated):
    try:
        expected = jobs.metadata(job)
    except jobs.JobUnavailable as exc:
        pytest.fail(f"cannot derive the {job} template from the code: {exc}")
    assert committed_metadata(job, generated) == expected


def test_the_build_loop_generates_the_metadata_before_building_the_spec():
    scale = open(os.path.join(REPO, "docs", "scale.md"), encoding="utf-8").read()
    loop = scale[scale.index("for JOB in privatize neighbours calibrate"):]
    loop = loop[:loop.index("done")]
    assert loop.index("python templates/generate_metadata.py $JOB") < loop.index("gcloud dataflow flex-template build")
    ignored = open(os.path.join(REPO, ".gitignore"), encoding="utf-8").read().split()
    assert "templates/*/metadata.json" in ignored


@pytest.mark.parametrize("job", sorted(jobs.JOBS))
def test_parameters_are_well_formed_and_documented(job, generated):
    metadata = committed_metadata(job, generated)
    names = [p["name"] for p in metadata["parameters"]]
    assert len(names) == len(set(names))
    for parameter in metadata["parameters"]:
        assert re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]*", parameter["name"]), parameter["name"]
        assert parameter["label"] and parameter["helpText"].strip(), f"{parameter['name']} has no help text"
        for regex in parameter.get("regexes", []):
            re.compile(regex)
    assert metadata["name"] and metadata["description"] and metadata["streaming"] is (job in jobs.STREAMING_TEMPLATES)


class ExampleOptions:  # not a PipelineOptions subclass: those register their flags with Beam for every test
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--corpus", help="where the corpus is")
        parser.add_argument("--rounds", "--round_count", dest="rounds", type=int, default=3, help="how many")
        parser.add_argument("--rate", type=float, default=0.5, help="a rate")
        parser.add_argument("--mode", choices=("fast", "exact"), default="fast", help="which mode")
        parser.add_argument("--verbose-log", "--verbose_log", action="store_true", help="log more")
        parser.add_argument("--lambda", dest="lam", type=float, help="a keyword's dest, not a flag")


def test_derivation_rules_for_names_required_and_types():
    import argparse

    parser = argparse.ArgumentParser()
    ExampleOptions._add_argparse_args(parser)
    params = {p["name"]: p for p in jobs.parameters(parser, required=("corpus",))}
    assert list(params) == ["corpus", "rounds", "rate", "mode", "verbose_log", "lambda"]  # flag names, not dests
    assert params["corpus"]["isOptional"] is False and params["rounds"]["isOptional"] is True
    assert params["rounds"]["regexes"] == [jobs.INT_REGEX] and params["mode"]["regexes"] == ["^(fast|exact)$"]
    assert params["verbose_log"]["regexes"] == [jobs.BOOL_REGEX] and params["verbose_log"]["label"] == "Verbose log"
    assert re.fullmatch(params["rate"]["regexes"][0], "1e-3") and not re.fullmatch(params["rate"]["regexes"][0], "x")


def test_launcher_parameters_map_back_to_the_job_flags():
    job_argv, other = template_main.to_job_argv("privatize", [
        "--input=gs://b/corpus/{yesterday}/*.txt", "--output=gs://b/out/{today:%Y/%m/%d}/r", "--epsilon=15",
        "--oov_policy=unk", "--keep_failed_text=true", "--search_k=10", "--text_field=title,body",
        "--project=p", "--region=europe-west1", "--temp_location=gs://b/tmp"], now=NIGHT)
    assert job_argv == ["--input=gs://b/corpus/2026-11-21/*.txt", "--output=gs://b/out/2026/11/22/r", "--epsilon=15",
                        "--oov_policy=unk", "--keep_failed_text", "--search_k=10", "--text_field=title,body"]
    assert other == ["--project=p", "--region=europe-west1", "--temp_location=gs://b/tmp"]
    assert template_main.to_job_argv("privatize", ["--keep_failed_text=false"], now=NIGHT)[0] == []
    with pytest.raises(template_main.TemplateArgumentError, match="true or false"):
        template_main.to_job_argv("privatize", ["--keep_failed_text=yes"], now=NIGHT)
    # a hyphenated spelling reaches the same flag (build-index's --vocab-size is also --vocab_size)
    assert template_main.to_job_argv("build-index", ["--vocab-size=10", "--output=gs://b/a"], now=NIGHT)[0] == [
        "--vocab_size=10", "--output=gs://b/a"]


def test_template_entry_point_runs_privatize_over_a_dated_prefix(tmp_path, small_artifact_dir):
    """What the nightly Scheduler job does, on the local runner: {yesterday} picks the dated input."""
    dated = tmp_path / "corpus" / "2026-11-21"
    dated.mkdir(parents=True)
    (dated / "reviews.txt").write_text(open(EXAMPLE_TXT, encoding="utf-8").read(), encoding="utf-8")
    (tmp_path / "corpus" / "2026-11-20").mkdir()  # another night's prefix, must not be read
    (tmp_path / "corpus" / "2026-11-20" / "other.txt").write_text("not tonight\n", encoding="utf-8")
    template_main.launch("privatize", [
        f"--input={tmp_path}/corpus/{{yesterday}}/*.txt", f"--output={tmp_path}/out/{{yesterday}}/reviews",
        f"--artifact={small_artifact_dir}", "--epsilon=1e6", "--oov_policy=keep", "--keep_failed_text=false",
        "--runner=FnApiRunner"], now=NIGHT)
    released = []
    for path in sorted(glob.glob(f"{tmp_path}/out/2026-11-21/reviews-*-of-*.txt")):
        released += open(path, encoding="utf-8").read().splitlines()
    assert sorted(released) == sorted(open(EXAMPLE_TXT, encoding="utf-8").read().splitlines())


def test_dataflow_dry_run_through_the_template_uses_the_template_image(tmp_path, small_artifact_dir, gcs_bucket,
                                                                       beam_gcs_anonymous, monkeypatch):
    monkeypatch.setenv(template_main.WORKER_IMAGE_ENV, "europe-docker.pkg.dev/p/textdp/textdp-privatize:0.1.0")
    result = template_main.launch("privatize", [
        f"--input={EXAMPLE_TXT}", f"--output=gs://{gcs_bucket}/out/reviews", f"--artifact={small_artifact_dir}",
        "--epsilon=15", "--runner=DataflowRunner", "--dry_run=True", "--project=textdp-test", "--region=europe-west1",
        f"--temp_location=gs://{gcs_bucket}/tmp"], now=NIGHT)
    environments = result.job.proto_pipeline.components.environments.values()
    assert any(b"textdp-privatize:0.1.0" in env.payload for env in environments)
    assert result.job.proto.type.name == "JOB_TYPE_BATCH"


def test_build_index_template_builds_on_a_worker_and_uploads(gcs_bucket, beam_gcs_anonymous, tmp_path, monkeypatch):
    from textdp.artifact import gcs
    from textdp.artifact.locate import open_artifact

    monkeypatch.setenv("TEXTDP_CACHE_DIR", str(tmp_path / "cache"))
    url = f"gs://{gcs_bucket}/artifacts/glove500"
    template_main.launch("build-index", [f"--output={url}", "--vocab_size=500", "--trees=1", "--runner=FnApiRunner"])
    assert open_artifact(gcs.fetch_artifact(url)).vocab_size == 500
    with pytest.raises(template_main.TemplateArgumentError, match="gs://"):
        template_main.launch("build-index", [f"--output={tmp_path}/local", "--runner=FnApiRunner"])


def test_neighbours_template_adds_the_table_to_a_gcs_artifact(gcs_bucket, beam_gcs_anonymous, small_artifact_dir,
                                                               tmp_path, monkeypatch):
    """The neighbours Flex Template's entry point with a gs:// artifact (local runner in place of Dataflow):
    the workers fetch the artifact and the table lands in the bucket with a new manifest."""
    import json

    from textdp.artifact import gcs
    from textdp.artifact.locate import open_artifact, read_manifest
    from textdp.artifact.neighbours import NeighbourTable

    monkeypatch.setenv("TEXTDP_CACHE_DIR", str(tmp_path / "cache"))
    url = gcs.upload_artifact(small_artifact_dir, f"gs://{gcs_bucket}/artifacts/glove5k-template")
    template_main.launch("neighbours", [f"--artifact={url}", "--k=8", "--shard_rows=2000",
                                        "--runner=FnApiRunner"]).wait_until_finish()
    manifest = read_manifest(url)
    assert manifest["neighbours"]["k"] == 8 and "neighbours_ids.npy" in manifest["files"]
    table = NeighbourTable.from_artifact(open_artifact(gcs.fetch_artifact(url)))
    assert table.k == 8 and (table.ids[:, 0] == range(5000)).all()  # every word is its own nearest
    assert json.loads(open(f"{small_artifact_dir}/manifest.json", encoding="utf-8").read()).get("neighbours") is None


def test_scheduler_request_uses_privatize_parameters_and_a_dated_prefix():
    with open(os.path.join(TEMPLATES, "scheduler", "privatize-nightly.json"), encoding="utf-8") as handle:
        launch = json.load(handle)["launchParameter"]
    metadata = jobs.metadata("privatize")
    known = {p["name"] for p in metadata["parameters"]}
    required = {p["name"] for p in metadata["parameters"] if not p["isOptional"]}
    assert set(launch["parameters"]) <= known and required <= set(launch["parameters"])
    assert "{yesterday}" in launch["parameters"]["input"] and "{yesterday}" in launch["parameters"]["output"]
    assert launch["containerSpecGcsPath"].endswith("/privatize.json")


def requirement_pin(name):
    with open(os.path.join(REPO, "requirements.txt"), encoding="utf-8") as handle:
        for line in handle:
            match = re.match(rf"^{re.escape(name)}(\[[^\]]*\])?==([^\s#]+)", line.strip())
            if match:
                return match.group(2)
    raise AssertionError(f"{name} is not pinned in requirements.txt")


def test_dockerfile_uses_the_projects_beam_python_and_launcher():
    with open(os.path.join(TEMPLATES, "Dockerfile"), encoding="utf-8") as handle:
        dockerfile = handle.read()
    beam = re.search(r"^ARG BEAM_VERSION=(\S+)$", dockerfile, re.M).group(1)
    python = re.search(r"^ARG PYTHON_VERSION=(\S+)$", dockerfile, re.M).group(1)
    assert beam == requirement_pin("apache-beam"), "the image must run the Beam version the project pins"
    assert requirement_pin("annoy")
    assert f"python{python.replace('.', '')}-template-launcher-base" in dockerfile
    assert "FROM apache/beam_python${PYTHON_VERSION}_sdk:${BEAM_VERSION}" in dockerfile
    assert "/opt/google/dataflow/python_template_launcher" in dockerfile
    assert "-r requirements.txt" in dockerfile
    # textdp's C extension is compiled in the stage that has a compiler and checked in the image
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels/textdp /src" in dockerfile
    assert "pip install --no-cache-dir --no-deps /wheels/textdp/textdp-*.whl" in dockerfile
    assert "assert int8_search.available()" in dockerfile
    entry = re.search(r"^ENV FLEX_TEMPLATE_PYTHON_PY_FILE=/template/(\S+)$", dockerfile, re.M).group(1)
    assert os.path.isfile(os.path.join(REPO, entry))
    for line in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.M):  # sources exist in the repository
        for source in line.split():
            assert os.path.exists(os.path.join(REPO, source)), f"Dockerfile copies {source}, which does not exist"


def test_cloud_build_config_passes_the_dockerfiles_build_args():
    with open(os.path.join(TEMPLATES, "Dockerfile"), encoding="utf-8") as handle:
        build_args = set(re.findall(r"^ARG (\w+)", handle.read(), re.M))
    with open(os.path.join(TEMPLATES, "cloudbuild.yaml"), encoding="utf-8") as handle:
        config = handle.read()
    assert '"-f", "templates/Dockerfile"' in config
    passed = set(re.findall(r'"--build-arg", "(\w+)=', config))
    assert passed == {"TEXTDP_JOB", "TEXTDP_IMAGE"} and passed <= build_args


@pytest.mark.parametrize("job", sorted(jobs.JOBS))
def test_template_offers_every_flag_the_jobs_help_lists(job):
    """Every job has ``help_parser()`` (its --help); the template must offer exactly those flags.

    Catches an options class a job starts using without importing it by name (which the
    derivation would then miss)."""
    import importlib

    module = importlib.import_module(jobs.JOBS[job].module)
    assert hasattr(module, "help_parser"), f"{jobs.JOBS[job].module} has no help_parser() (its --help)"
    help_flags = {jobs.parameter_name(action) for action in jobs.flag_actions(module.help_parser())}
    assert help_flags == {p["name"] for p in jobs.metadata(job)["parameters"]}
