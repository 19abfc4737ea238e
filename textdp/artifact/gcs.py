"""Vocabulary artifacts on Google Cloud Storage: upload them, and fetch them once per machine.

A Beam job that runs on many machines names its artifact with a ``gs://bucket/prefix`` URL. Every
worker process calls :func:`fetch_artifact` (through ``textdp.artifact.locate.resolve_artifact``) and
gets back a local directory to memory-map. The first process on a machine downloads; the others
on that machine wait on a file lock and then reuse the same directory, so the page cache holds one
copy of the vectors and the Annoy index however many worker processes there are.

How a fetch stays safe:

* The remote ``manifest.json`` is read and validated first. The cache directory is named after
  the URL *and* the SHA-256 of that manifest, so an artifact that changes remotely (new files
  added, or rebuilt) lands in a new directory; a directory that a running process has mapped is
  never replaced or modified in place.
* Objects are downloaded in ranged chunks to ``<name>.part`` inside a private staging directory,
  each chunk retried with exponential backoff on transient errors (connection resets, 429, 5xx).
* Every file's size and SHA-256 are checked against the manifest before the staging directory is
  renamed, in one atomic step, to its final name. A corrupted object is refused with an error
  naming it, and is never retried (downloading it again would give the same bytes).
* An interrupted fetch leaves no final directory. Ctrl-C or an error removes the staging
  directory at once; a killed process leaves one behind, which the next fetch of the same
  artifact removes while it holds the lock.

Uploads write every file before ``manifest.json``, so a reader never sees a manifest whose files
are missing, and never overwrite an object with different content (each object records its
SHA-256 in its metadata). Before a job starts, :func:`check_remote_files` confirms that the objects
it will use exist with the manifest's sizes, from object metadata alone (``textdp.artifact.locate``).

This module builds on ``textdp.artifact.store`` (local artifact directories) and does not import Beam:
pipelines read and write their own inputs and outputs on gs:// through Beam's file systems.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from textdp.artifact.store import MANIFEST, Progress, build_artifact, cache_dir, parse_manifest, read_directory_manifest, staged_directory
from textdp.artifact.verification import sha256_file
from textdp.errors import ArtifactError
from textdp.paths import shown

GS_SCHEME = "gs://"
SHA256_METADATA_KEY = "textdp-sha256"
DEFAULT_CHUNK_BYTES = 64 << 20
REQUEST_TIMEOUT = (30, 300)  # seconds: connect, read
_STAGING_MARK = ".staging-"
_PART_SUFFIX = ".part"


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for one request: delays initial, x multiplier, ... capped."""

    attempts: int = 6
    initial_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 30.0

    def delays(self):
        delay = self.initial_delay
        for _ in range(self.attempts - 1):
            yield min(delay, self.max_delay) * random.uniform(0.5, 1.0)
            delay *= self.multiplier


DEFAULT_RETRY = RetryPolicy()


# --- locations and client --------------------------------------------------------------------


def is_gcs_url(location: Optional[str]) -> bool:
    return bool(location) and location.startswith(GS_SCHEME)


def parse_gcs_url(url: str) -> Tuple[str, str]:
    """``gs://bucket/a/b/`` -> ``("bucket", "a/b")``; the prefix may be empty."""
    if not is_gcs_url(url):
        raise ArtifactError(f"{url!r} is not a gs:// URL")
    bucket, _, prefix = url[len(GS_SCHEME):].partition("/")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]", bucket):
        raise ArtifactError(f"{url!r} does not name a valid Cloud Storage bucket")
    return bucket, prefix.strip("/")


def _object_name(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


GCP_EXTRA = "pip install 'textdp[gcp]'"


def require_gcp(what: str = "gs://") -> None:
    """Refuse, in one line, when the install has no GCP extra (google-cloud-storage, Beam's GCS file system).

    The base install runs locally without the GCP stack (setup.py); ``what`` names what needed it."""
    from textdp.errors import TextdpError

    try:
        import google.cloud.storage  # noqa: F401
    except ImportError:
        raise TextdpError(f"{what} needs the GCP extra: {GCP_EXTRA}") from None


def storage_client():
    """A google-cloud-storage client with Application Default Credentials, else anonymous.

    With ``STORAGE_EMULATOR_HOST`` set (a local emulator in tests) the library itself points at the
    emulator and uses anonymous credentials. Without credentials, public buckets still work.
    """
    require_gcp()
    from google.auth.exceptions import DefaultCredentialsError
    from google.cloud import storage

    try:
        return storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT") or None)
    except DefaultCredentialsError:
        return storage.Client.create_anonymous_client()


def _transient_errors() -> tuple:
    import requests
    from google.api_core import exceptions as api

    errors = [api.TooManyRequests, api.InternalServerError, api.BadGateway, api.ServiceUnavailable,
              api.GatewayTimeout, requests.exceptions.ConnectionError, requests.exceptions.Timeout,
              requests.exceptions.ChunkedEncodingError, ConnectionError, TimeoutError]
    try:
        from google.cloud.storage.exceptions import DataCorruption

        errors.append(DataCorruption)  # the library's own transfer checksum (whole-object reads)
    except ImportError:
        pass
    return tuple(errors)


def _with_retries(action: Callable, what: str, policy: RetryPolicy, say: Progress):
    """Run ``action()``; on a transient error wait (exponential backoff) and try again."""
    transient = _transient_errors()
    delays = policy.delays()
    attempt = 1
    while True:
        try:
            return action()
        except transient as exc:
            delay = next(delays, None)
            if delay is None:
                raise ArtifactError(f"{what} failed after {attempt} attempts ({type(exc).__name__}); "
                                    "Cloud Storage unreachable or overloaded") from exc
            say(f"{what}: {type(exc).__name__}, retry {attempt}/{policy.attempts - 1} in {delay:.1f}s")
            time.sleep(delay)
            attempt += 1


def _not_found_or_denied(exc: BaseException) -> bool:
    from google.api_core import exceptions as api

    return isinstance(exc, (api.NotFound, api.Forbidden, api.Unauthorized))


# --- fetching --------------------------------------------------------------------------------


def remote_cache_root() -> str:
    return os.path.join(cache_dir(), "remote")


def cache_key(gs_url: str, manifest_sha256: str) -> str:
    """Directory name for one version of one remote artifact: readable, unique per URL + manifest."""
    bucket, prefix = parse_gcs_url(gs_url)
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{bucket}_{prefix}").strip("._")[-60:]
    url_digest = hashlib.sha256(f"gs://{bucket}/{prefix}".encode("utf-8")).hexdigest()[:12]
    return f"{readable}-{url_digest}-{manifest_sha256[:16]}"


def fetch_artifact(gs_url: str, progress: Optional[Progress] = None, *, retry: RetryPolicy = DEFAULT_RETRY,
                   chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> str:
    """Return a local, verified copy of the artifact at ``gs_url``, downloading it at most once.

    Safe to call from many processes and threads of one machine at once (they share a file lock
    per artifact version). ``progress`` receives one-line messages (never file contents).
    """
    say = progress or (lambda _msg: None)
    bucket_name, prefix = parse_gcs_url(gs_url)
    client = storage_client()
    bucket = client.bucket(bucket_name)
    manifest_url = f"gs://{bucket_name}/{_object_name(prefix, MANIFEST)}"
    manifest_bytes = _read_manifest_object(bucket, prefix, manifest_url, retry, say)
    manifest = parse_manifest(manifest_bytes, manifest_url)  # kind, format version, required fields
    manifest_digest = hashlib.sha256(manifest_bytes).hexdigest()
    root = remote_cache_root()
    final = os.path.join(root, cache_key(gs_url, manifest_digest))
    if _is_complete_copy(final, manifest_bytes):
        return final
    os.makedirs(root, exist_ok=True)
    from filelock import FileLock, Timeout

    lock = FileLock(final + ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say(f"another process on this machine is fetching {gs_url}; waiting for it")
        lock.acquire()
    try:
        if _is_complete_copy(final, manifest_bytes):
            say(f"{gs_url} already in the local cache at {final}")
            return final
        if os.path.exists(final):
            raise ArtifactError(
                f"{final} exists but does not match {manifest_url}: cached artifacts are read-only and "
                "must not be modified; remove that directory (when no job uses it) and fetch again")
        _remove_stale_staging(root, os.path.basename(final), say)
        with staged_directory(final, prefix=os.path.basename(final) + _STAGING_MARK) as staging:
            _download_into(bucket, prefix, gs_url, manifest, manifest_bytes, staging, retry, chunk_bytes, say)
        say(f"fetched {gs_url} into {final}")
        return final
    finally:
        lock.release()


def read_remote_manifest(gs_url: str, progress: Optional[Progress] = None, *,
                         retry: RetryPolicy = DEFAULT_RETRY) -> dict:
    """The validated manifest of the artifact at ``gs_url``, read without fetching the artifact."""
    say = progress or (lambda _msg: None)
    bucket_name, prefix = parse_gcs_url(gs_url)
    bucket = storage_client().bucket(bucket_name)
    manifest_url = f"gs://{bucket_name}/{_object_name(prefix, MANIFEST)}"
    return parse_manifest(_read_manifest_object(bucket, prefix, manifest_url, retry, say), manifest_url)


def check_remote_files(gs_url: str, entries: Dict[str, dict], progress: Optional[Progress] = None, *,
                       retry: RetryPolicy = DEFAULT_RETRY) -> None:
    """Refuse unless every object named in ``entries`` (file name -> manifest entry) exists under
    ``gs_url`` with the recorded size (and the recorded SHA-256, where the uploader stored it in the
    object's metadata). Reads object metadata only, never content: the workers hash on fetch."""
    say = progress or (lambda _msg: None)
    bucket_name, prefix = parse_gcs_url(gs_url)
    bucket = storage_client().bucket(bucket_name)
    for name in sorted(entries):
        _require_object(bucket, prefix, gs_url, name, entries[name], retry, say)


def _read_manifest_object(bucket, prefix: str, manifest_url: str, retry: RetryPolicy, say: Progress) -> bytes:
    blob = bucket.blob(_object_name(prefix, MANIFEST))
    try:
        return _with_retries(lambda: blob.download_as_bytes(timeout=REQUEST_TIMEOUT, retry=None),
                             f"reading {manifest_url}", retry, say)
    except Exception as exc:
        if _not_found_or_denied(exc):
            raise ArtifactError(f"cannot read {manifest_url} ({type(exc).__name__}): no textdp artifact there, "
                                "or no permission to read it") from None
        raise


def _is_complete_copy(path: str, manifest_bytes: bytes) -> bool:
    """True when ``path`` is a finished fetch of exactly this manifest (renamed into place whole)."""
    try:
        with open(os.path.join(path, MANIFEST), "rb") as handle:
            if handle.read() != manifest_bytes:
                return False
        files = json.loads(manifest_bytes)["files"]
        return all(os.path.getsize(os.path.join(path, name)) == entry["bytes"] for name, entry in files.items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _remove_stale_staging(root: str, key: str, say: Progress) -> None:
    """Delete staging directories a killed fetch left behind (we hold the artifact's lock)."""
    for name in os.listdir(root):
        if name.startswith(key + _STAGING_MARK):
            say(f"removing an interrupted download: {name}")
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _download_into(bucket, prefix: str, gs_url: str, manifest: dict, manifest_bytes: bytes, staging: str,
                   retry: RetryPolicy, chunk_bytes: int, say: Progress) -> None:
    with open(os.path.join(staging, MANIFEST), "wb") as handle:
        handle.write(manifest_bytes)
    files = manifest["files"]
    total = sum(int(entry["bytes"]) for entry in files.values())
    say(f"downloading {gs_url}: {len(files)} files, {total / 2**20:,.1f} MiB")
    for name in sorted(files):
        if name != os.path.basename(name) or name in ("", ".", "..", MANIFEST):
            raise ArtifactError(f"{gs_url}/{MANIFEST} lists an invalid file name {name!r}")
        _download_file(bucket, prefix, gs_url, name, files[name], staging, retry, chunk_bytes, say)
    for name in list(files) + [MANIFEST]:
        os.chmod(os.path.join(staging, name), 0o444)  # cached copies are read-only


def _download_file(bucket, prefix: str, gs_url: str, name: str, entry: dict, staging: str,
                   retry: RetryPolicy, chunk_bytes: int, say: Progress) -> None:
    object_url = f"{gs_url.rstrip('/')}/{name}"
    expected_bytes, expected_sha = int(entry["bytes"]), entry["sha256"]
    remote = _require_object(bucket, prefix, gs_url, name, entry, retry, say)
    pinned = bucket.blob(_object_name(prefix, name), generation=remote.generation)  # chunks all from one object version
    part = os.path.join(staging, name + _PART_SUFFIX)
    digest = hashlib.sha256()
    say(f"downloading {name} ({expected_bytes / 2**20:,.1f} MiB)")
    with open(part, "wb") as out:
        for start in range(0, expected_bytes, chunk_bytes):
            end = min(start + chunk_bytes, expected_bytes) - 1
            chunk = _with_retries(
                lambda s=start, e=end: pinned.download_as_bytes(start=s, end=e, checksum=None, raw_download=True,
                                                                timeout=REQUEST_TIMEOUT, retry=None),
                f"downloading {object_url} bytes {start}-{end}", retry, say)
            if len(chunk) != end - start + 1:
                raise ArtifactError(f"{object_url}: short read at byte {start}")
            out.write(chunk)
            digest.update(chunk)
            say(f"{name}: {end + 1:,} of {expected_bytes:,} bytes")
        out.flush()
        os.fsync(out.fileno())
    if digest.hexdigest() != expected_sha:
        raise ArtifactError(f"{object_url} fails its SHA-256 check against {MANIFEST} (corrupted object, or a "
                            "file from another version of the artifact); rebuild and upload the artifact again")
    os.rename(part, os.path.join(staging, name))


def _require_object(bucket, prefix: str, gs_url: str, name: str, entry: dict, retry: RetryPolicy, say: Progress):
    """The object of artifact file ``name`` (metadata only), refused if missing or not the manifest's file."""
    object_url = f"{gs_url.rstrip('/')}/{name}"
    object_name = _object_name(prefix, name)
    try:
        remote = _with_retries(lambda: bucket.get_blob(object_name, timeout=REQUEST_TIMEOUT, retry=None),
                               f"looking up {object_url}", retry, say)
    except Exception as exc:
        if _not_found_or_denied(exc):
            raise ArtifactError(f"cannot read {object_url} ({type(exc).__name__})") from None
        raise
    if remote is None:
        raise ArtifactError(f"{object_url} is missing: the artifact in the bucket is incomplete")
    if remote.size != int(entry["bytes"]):
        raise ArtifactError(f"{object_url} has {remote.size} bytes but {MANIFEST} records {entry['bytes']} "
                            "(corrupted or partly uploaded artifact); rebuild and upload it again")
    recorded_sha = (remote.metadata or {}).get(SHA256_METADATA_KEY)
    if recorded_sha is not None and recorded_sha != entry["sha256"]:
        raise ArtifactError(f"{object_url} was uploaded with SHA-256 {recorded_sha[:12]}... but {MANIFEST} records "
                            f"{entry['sha256'][:12]}... (a file from another version of the artifact); rebuild and "
                            "upload the artifact again")
    return remote


def checkout_artifact(gs_url: str, dest: str, progress: Optional[Progress] = None) -> str:
    """A writable local copy of a gs:// artifact at ``dest`` (new), for adding files and uploading back.

    Fetches into the cache first, then hard-links the files (copies across file systems):
    ``textdp.artifact.store.add_files`` only adds new files and replaces ``manifest.json`` by rename, so
    the cached copy that the links share is never modified. Typical use, for a job that adds a
    table to a gs:// artifact: ``checkout_artifact`` -> ``add_files`` -> ``upload_artifact``.
    """
    cached = fetch_artifact(gs_url, progress=progress)
    dest = os.path.abspath(dest)
    if os.path.exists(dest):
        raise ArtifactError(f"{shown(dest)} already exists; choose a new directory for the working copy")
    os.makedirs(dest)
    for name in os.listdir(cached):
        source, target = os.path.join(cached, name), os.path.join(dest, name)
        if name == MANIFEST:
            shutil.copyfile(source, target)  # a private, writable manifest (replaced by add_files)
            continue
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
    return dest


# --- uploading -------------------------------------------------------------------------------


def upload_artifact(local_dir: str, gs_url: str, progress: Optional[Progress] = None, *,
                    retry: RetryPolicy = DEFAULT_RETRY) -> str:
    """Upload a local artifact to ``gs_url``: every file first, ``manifest.json`` last.

    A file already in the bucket with the same SHA-256 is kept (so adding a table to an uploaded
    artifact only sends the new files); one with different content is never overwritten.
    Returns ``gs_url``.
    """
    say = progress or (lambda _msg: None)
    manifest = read_directory_manifest(local_dir)
    for name, entry in manifest["files"].items():
        path = os.path.join(local_dir, name)
        if not os.path.isfile(path) or os.path.getsize(path) != entry["bytes"] or sha256_file(path) != entry["sha256"]:
            raise ArtifactError(f"{shown(path)} is missing or fails its checksum; refusing to upload a damaged artifact")
    bucket_name, prefix = parse_gcs_url(gs_url)
    bucket = storage_client().bucket(bucket_name)
    for name in sorted(manifest["files"]):
        _upload_file(bucket, prefix, gs_url, os.path.join(local_dir, name), name, manifest["files"][name],
                     retry, say)
    manifest_blob = bucket.blob(_object_name(prefix, MANIFEST))
    manifest_blob.content_type = "application/json"
    _with_retries(lambda: manifest_blob.upload_from_filename(os.path.join(local_dir, MANIFEST), checksum="crc32c",
                                                             timeout=REQUEST_TIMEOUT, retry=None),
                  f"uploading {MANIFEST}", retry, say)
    say(f"artifact uploaded to {gs_url}")
    return gs_url


def _upload_file(bucket, prefix: str, gs_url: str, path: str, name: str, entry: dict, retry: RetryPolicy,
                 say: Progress) -> None:
    from google.api_core.exceptions import PreconditionFailed

    object_name = _object_name(prefix, name)
    object_url = f"{gs_url.rstrip('/')}/{name}"

    def existing_matches() -> bool:
        remote = _with_retries(lambda: bucket.get_blob(object_name, timeout=REQUEST_TIMEOUT, retry=None),
                               f"looking up {object_url}", retry, say)
        if remote is None:
            return False
        if (remote.metadata or {}).get(SHA256_METADATA_KEY) == entry["sha256"] and remote.size == entry["bytes"]:
            return True
        raise ArtifactError(f"{object_url} already exists with different content; artifact files are never "
                            "overwritten: upload to a new gs:// prefix")

    if existing_matches():
        say(f"{name} already in the bucket, unchanged")
        return
    blob = bucket.blob(object_name)
    blob.metadata = {SHA256_METADATA_KEY: entry["sha256"]}
    say(f"uploading {name} ({entry['bytes'] / 2**20:,.1f} MiB)")
    try:
        # if_generation_match=0: create only, so a concurrent writer cannot be overwritten either.
        _with_retries(lambda: blob.upload_from_filename(path, checksum="crc32c", if_generation_match=0,
                                                        timeout=REQUEST_TIMEOUT, retry=None),
                      f"uploading {object_url}", retry, say)
    except PreconditionFailed:
        if not existing_matches():  # an earlier attempt of ours may have succeeded before a reset
            raise


def build_and_upload(source, gs_url: str, vocab_size: Optional[int] = None, trees: int = 50, seed: int = 0,
                     progress: Optional[Progress] = None) -> str:
    """Build an artifact locally, upload it to ``gs_url`` and keep the build as this machine's cached copy."""
    say = progress or (lambda _msg: None)
    bucket_name, prefix = parse_gcs_url(gs_url)
    existing = storage_client().bucket(bucket_name).get_blob(_object_name(prefix, MANIFEST), timeout=REQUEST_TIMEOUT)
    if existing is not None:
        raise ArtifactError(f"{gs_url} already holds an artifact; artifacts are never overwritten, choose a new prefix")
    root = remote_cache_root()
    os.makedirs(root, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=".build-", dir=root)
    try:
        built = build_artifact(source, os.path.join(workdir, "artifact"), vocab_size=vocab_size, trees=trees,
                               seed=seed, progress=say)
        upload_artifact(built, gs_url, progress=say)
        with open(os.path.join(built, MANIFEST), "rb") as handle:
            final = os.path.join(root, cache_key(gs_url, hashlib.sha256(handle.read()).hexdigest()))
        from filelock import FileLock

        with FileLock(final + ".lock"):
            if not os.path.exists(final):
                for name in os.listdir(built):
                    os.chmod(os.path.join(built, name), 0o444)
                os.rename(built, final)  # the bytes just uploaded: later fetches on this machine reuse them
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return gs_url


# --- the pre-run check of gs:// inputs and outputs ---------------------------------------------------

PREFLIGHT_TIMEOUT_S = 10.0


def preflight(urls, *, writes: bool, timeout: float = PREFLIGHT_TIMEOUT_S) -> None:
    """Refuse, within about ``timeout`` seconds, gs:// locations a job could not use.

    Without this a job with no credentials or no route to Cloud Storage spends two minutes in the
    client library's retries and ends in a traceback. For each bucket named in ``urls`` one listing
    request is made, with no retry: no answer in time, a missing bucket or a refusal is a
    TextdpError naming the bucket (never object contents). ``writes``: the job writes there, so
    Application Default Credentials are required (reads may be anonymous: public buckets). With
    ``STORAGE_EMULATOR_HOST`` set (a local emulator) no credentials are needed.
    """
    from textdp.errors import TextdpError

    buckets = {}
    for url in urls:
        if is_gcs_url(url):
            bucket, prefix = parse_gcs_url(url)
            buckets.setdefault(bucket, prefix)
    if not buckets:
        return
    require_gcp()
    if not os.environ.get("STORAGE_EMULATOR_HOST") and writes:
        missing = missing_credentials(timeout)
        if missing:
            raise TextdpError(f"gs://{next(iter(buckets))}: writing to Cloud Storage needs Google Cloud "
                              f"credentials, and none were found ({missing}); {CREDENTIALS_HINT}")
    import requests
    from google.api_core import exceptions as api

    client = storage_client()
    for bucket, prefix in buckets.items():
        try:
            next(iter(client.list_blobs(bucket, prefix=prefix.split("*")[0], max_results=1, timeout=timeout,
                                        retry=None)), None)
        except api.NotFound:
            raise TextdpError(f"gs://{bucket} does not exist (or is not visible to these credentials)") from None
        except (api.Forbidden, api.Unauthorized) as exc:
            raise TextdpError(f"gs://{bucket}: access refused ({exc.code} {type(exc).__name__}); check the "
                              "credentials and the bucket's permissions") from None
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError,
                TimeoutError) as exc:
            raise TextdpError(f"gs://{bucket}: Cloud Storage could not be reached ({type(exc).__name__}; no answer "
                              f"within {timeout:g} s counts as none); check the network, proxy and credentials") from None


# --- the pre-run check of the Dataflow runner (issue 27, item 7) -------------------------------------

CREDENTIALS_HINT = "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
SERVICE_RUNNERS = ("DataflowRunner", "TestDataflowRunner")  # the runners that need Google Cloud to build a job


def missing_credentials(timeout: float = PREFLIGHT_TIMEOUT_S) -> Optional[str]:
    """None when Application Default Credentials are found within ``timeout`` seconds, else why not (a phrase).

    ``google.auth.default()`` ends, when nothing else is configured, by probing the GCE metadata server
    (``GCE_METADATA_HOST``), with retries; where no metadata server answers that can take long. The lookup
    runs in a daemon thread and is abandoned after ``timeout``: the caller refuses and the process ends.
    """
    import threading

    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    outcome = {}

    def look() -> None:
        try:
            google.auth.default()
            outcome["missing"] = None
        except DefaultCredentialsError:
            path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
            outcome["missing"] = (f"GOOGLE_APPLICATION_CREDENTIALS names {path!r}, which is not a usable key file"
                                  if path else "no GOOGLE_APPLICATION_CREDENTIALS, no gcloud application-default "
                                               "login and no metadata server")
        except Exception as exc:  # a refusal in one line, whatever went wrong
            outcome["missing"] = f"the credentials lookup failed: {type(exc).__name__}"

    thread = threading.Thread(target=look, name="textdp-credentials", daemon=True)
    thread.start()
    thread.join(timeout)
    if "missing" not in outcome:
        return f"none found within {timeout:g} s: no key file or gcloud login, and the metadata server did not answer"
    return outcome["missing"]


def is_service_runner(runner: Optional[str]) -> bool:
    return (runner or "").split(".")[-1] in SERVICE_RUNNERS


def preflight_runner(runner: Optional[str], *, dry_run=False, temp_location: Optional[str] = None,
                     staging_location: Optional[str] = None, timeout: float = PREFLIGHT_TIMEOUT_S) -> None:
    """Refuse, within about ``2 * timeout`` seconds, a run the runner could not start; before any worker.

    ``dry_run``: Beam's ``--dry_run`` flag as given (a string: Beam treats any non-empty value, "False"
    included, as a dry run). On a local runner it would be ignored and the job would run for real, so it
    is refused there. DataflowRunner (dry run or not) needs the GCP extra, Google Cloud credentials and a
    gs:// ``--temp_location`` (else Beam looks up or creates a default bucket, retrying for minutes
    without a network); the bucket is checked like every gs:// output (``preflight``).
    """
    from textdp.errors import TextdpError

    if dry_run not in (None, False, "") and str(dry_run) not in ("True", "true"):
        raise TextdpError(f"--dry_run={dry_run} is ambiguous: Beam treats any value as a dry run; give "
                          "--dry_run=True or leave the flag out")
    service = is_service_runner(runner)
    if dry_run and not service:
        raise TextdpError(f"--dry_run applies to --runner DataflowRunner only (runner {runner} would ignore it "
                          "and run the job for real); leave it out to run locally")
    if not service:
        return
    name = runner.split(".")[-1]
    require_gcp(f"--runner {name}")
    try:
        import importlib.util

        dataflow_client = importlib.util.find_spec("google.cloud.dataflow")
    except ImportError:
        dataflow_client = None
    if dataflow_client is None:
        raise TextdpError(f"--runner {name} needs the GCP extra (google-cloud-dataflow-client): {GCP_EXTRA}")
    missing = missing_credentials(timeout)
    if missing:
        raise TextdpError(f"--runner {name}{' --dry_run' if dry_run else ''} needs Google Cloud credentials, and "
                          f"none were found ({missing}); {CREDENTIALS_HINT}")
    locations = [loc for loc in (temp_location, staging_location) if loc]
    if not locations:
        raise TextdpError(f"--runner {name} needs --temp_location gs://BUCKET/PATH (textdp does not let Beam look "
                          "up or create a default bucket)")
    if not all(is_gcs_url(loc) for loc in locations):
        raise TextdpError(f"--runner {name}: --temp_location and --staging_location must be gs:// locations")
    preflight(locations, writes=True, timeout=timeout)
