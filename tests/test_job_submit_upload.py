"""What `ray job submit --working-dir .` uploads from a checkout, found by Ray 2.60's own
packer (`create_package`, what the job SDK zips): the code and configs, never a `.env`, a key,
cloud credentials, a token file, `.git`, a virtual environment, wheels or caches, whether Ray
also reads `.gitignore` or not (RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1 turns that off; `.rayignore`
is read either way). `.dockerignore` leaves the same out of the image, and no documented
submit command puts anything in the runtime env."""

from __future__ import annotations

import pathlib
import re
import shutil
import zipfile

import pytest
import yaml

from tests.test_job_deploy import walk

ROOT = pathlib.Path(__file__).resolve().parents[1]

KEPT = ["pyproject.toml", "ray_jobs/job.py", "examples/nightly_s3.yaml", "data/sample/dump.parquet",
        "docs/credentials-howto.md", ".gitignore", ".rayignore"]
LEFT_OUT = [".env", ".env.production", "deploy/.env", "certs/server.pem", "certs/server.key", "id_rsa", "id_ed25519.pub",
            ".aws/credentials", ".aws/config", ".ssh/known_hosts", ".netrc", "credentials", "credentials.json",
            "home/.ray/auth_token", "ray.token", ".git/config", ".venv/bin/python", "venv/lib/site.py",
            "torch-2.13.0-cp311-linux_x86_64.whl", ".whl/ctgscore-0.1-py3-none-any.whl",
            ".cache/tiny-models/tiny-gpt2/model.safetensors", "out/sample/part-0.parquet", "build/lib/x.py",
            "ray_jobs/__pycache__/job.cpython-311.pyc", "ctgscore.egg-info/PKG-INFO", ".ruff_cache/0.17/123"]


def uploaded(tree: pathlib.Path, tmp_path: pathlib.Path, include_gitignore: bool) -> set[str]:
    from ray._private.runtime_env.packaging import create_package

    target = tmp_path / f"pkg-{include_gitignore}.zip"
    create_package(str(tree), target, include_gitignore=include_gitignore)
    with zipfile.ZipFile(target) as package:
        return {name for name in package.namelist() if not name.endswith("/")}


@pytest.mark.parametrize("include_gitignore", [True, False], ids=["with-gitignore", "rayignore-alone"])
def test_working_dir_upload_leaves_out_secrets_environments_and_caches(tmp_path, include_gitignore):
    tree = tmp_path / "checkout"
    for name in KEPT + LEFT_OUT:
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"contents of {name}\n")
    for name in (".gitignore", ".rayignore"):
        shutil.copy(ROOT / name, tree / name)
    assert uploaded(tree, tmp_path, include_gitignore) == set(KEPT)


def test_this_checkout_uploads_no_secret_or_cache():
    """The real checkout, listed as Ray walks it with .rayignore alone (no zip): nothing under the
    folders above, no file named like a secret, and well under Ray's package size limit."""
    from ray._private.runtime_env.packaging import _dir_travel

    found: list[pathlib.Path] = []
    _dir_travel(ROOT, [], lambda path: found.append(path), include_gitignore=False)  # .rayignore alone
    files = [p.relative_to(ROOT).as_posix() for p in found if p.is_file()]
    assert "pyproject.toml" in files and "ray_jobs/entrypoint.py" in files
    secret = re.compile(r"(^|/)(\.git|\.venv|venv|\.cache|\.ruff_cache|\.aws|\.ssh|out|build)($|/)|(^|/)\.env($|\.)"
                        r"|\.(whl|pem|key|pyc)$")
    assert not [f for f in files if secret.search(f)]
    assert sum((ROOT / f).stat().st_size for f in files) < 100 * 2**20


def _patterns(name: str) -> set[str]:
    lines = [line.strip() for line in (ROOT / name).read_text().splitlines()]
    return {re.sub(r"^(\*\*/|/)|/$", "", line) for line in lines if line and not line.startswith("#")}


def test_dockerignore_leaves_out_what_rayignore_does():
    """The image is built from the same checkout: every pattern of .rayignore is in
    .dockerignore too, and neither leaves out what the image and the upload need."""
    ray, docker = _patterns(".rayignore"), _patterns(".dockerignore")
    assert ray - docker == set(), ray - docker
    for needed in (".rayignore", ".gitignore", "pyproject.toml", "deploy/Dockerfile"):
        assert not any(pathlib.PurePath(needed).match(p) for p in docker | ray), needed


def test_no_documented_submit_carries_a_runtime_env():
    """Every `ray job submit` the docs and deploy files show uploads the checkout's root (where
    .rayignore is) and passes no runtime env: credentials never travel that way."""
    sources = [ROOT / "README.md", ROOT / "cluster.yaml", *(ROOT / "docs").glob("*.md"), *(ROOT / "deploy").iterdir()]
    commands = []
    for path in sources:
        texts = [path.read_text()]
        if path.suffix == ".yaml":  # a command in a YAML string (the CronJobs' folded args) is one line there
            texts += [item for doc in yaml.safe_load_all(texts[0]) for mapping in walk(doc)
                      for value in mapping.values() for item in (value if isinstance(value, list) else [value])
                      if isinstance(item, str)]
        for text in texts:
            text = re.sub(r"\\\n\s*#?\s*", " ", text)  # continued lines, in comments too
            commands += [(path.name, line) for line in re.findall(r"ray job submit\b[^\n`|]*", text)
                         if "--address" in line]
    assert {name for name, _ in commands} == {"README.md", "cluster.yaml", "nightly.cron", "nightly-cronjob.yaml",
                                              "leaderboard-cronjob.yaml"}
    for name, command in commands:
        assert "--working-dir . " in command, (name, command)
        assert not re.search(r"--runtime-env|env_vars|AWS_|RAY_AUTH_TOKEN=|RAY_RUNTIME_ENV_IGNORE", command), (name, command)


def test_library_code_never_sets_a_runtime_env():
    """No call in the library passes `runtime_env` (ray.init, .options, job submission), so no
    credential or environment of the driver rides along to the workers (docs/security.md)."""
    import ast

    calls = 0
    for package in ("scoring", "meta_eval", "splits", "ray_jobs", "ctgscore"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Call):
                    calls += 1
                    assert not any(k.arg in ("runtime_env", "runtime_env_json") for k in node.keywords), \
                        f"{path.relative_to(ROOT)}:{node.lineno}"
    assert calls > 1000  # the scan saw the code
