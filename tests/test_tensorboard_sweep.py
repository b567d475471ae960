"""A sweep read in TensorBoard: a real ``tensorboard`` server over a real 3-job sweep lists each
job's curves by its swept value (not by its job number), and the HParams experiment it serves
puts the swept key first, marked as differing, with no key the runs' schedule lacks. With
Debian's Chromium installed, the page itself is loaded headless and must show the same names."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from helpers import TINY, run_train, write_cifar_arrays


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(logdir, tries: int = 5) -> tuple[subprocess.Popen, str]:
    """A TensorBoard server over ``logdir`` once it lists its 3 runs. The port is free when chosen but
    another process (the other test worker's) may take it before TensorBoard binds it: then again on a
    new port; any other exit fails with TensorBoard's own message."""
    for _ in range(tries):
        port = _free_port()
        server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port",
                                   str(port), "--host", "127.0.0.1", "--reload_interval", "1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while server.poll() is None:
            try:
                if len(json.loads(urllib.request.urlopen(f"{url}/data/runs", timeout=5).read())) >= 3:
                    return server, url
            except OSError:
                pass
            if time.time() > deadline:
                server.kill()
                server.wait()
                pytest.fail("tensorboard served no runs in 90 s")
            time.sleep(0.5)
        message = server.stderr.read()
        assert "could not bind" in message, message[-2000:]
    pytest.fail(f"tensorboard found no free port in {tries} tries")


@pytest.fixture(scope="module")
def served_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tb")
    cifar_arrays = write_cifar_arrays(tmp / "data" / "cifar10")
    sweep = tmp / "sweep"
    proc = run_train(["-m", f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.nu=0.3,0.5,0.7",
                      "schedule.epochs=2", f"hydra.sweep.dir={sweep}"], cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    server, url = _serve(sweep)
    yield url, sweep
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:  # fail, but leave no server behind
        server.kill()
        server.wait()
        raise


def test_the_runs_are_named_by_their_swept_value(served_sweep):
    url, _ = served_sweep
    runs = json.loads(urllib.request.urlopen(f"{url}/data/runs", timeout=10).read())
    assert sorted(runs) == [f"{k}/tensorboard/schedule.nu={nu}" for k, nu in enumerate((0.3, 0.5, 0.7))]


def test_the_hparams_table_leads_with_the_swept_key_and_has_only_the_schedules_keys(served_sweep):
    url, _ = served_sweep
    request = urllib.request.Request(f"{url}/data/plugin/hparams/experiment",
                                     data=json.dumps({"experimentName": ""}).encode(),
                                     headers={"Content-Type": "application/json", "X-TensorBoard-Feature-Flags": "{}"})
    experiment = json.loads(urllib.request.urlopen(request, timeout=10).read())
    infos = experiment["hparamInfos"]
    assert infos[0]["name"] == "schedule.nu" and infos[0]["differs"] is True
    assert not [i["name"] for i in infos[1:] if i.get("differs")]
    names = {i["name"] for i in infos}
    assert names == {"schedule", "schedule.nu", "schedule.epochs", "model.hidden", "optim.lr", "noise", "seed", "epochs"}


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_a_headless_browser_shows_the_runs_by_their_swept_value(served_sweep):
    """CI installs Chromium and sets SCHEDA_REQUIRE_BROWSER (.ci/run), so there a missing browser
    fails; a developer's machine without one skips this test only."""
    if CHROMIUM is None:
        if os.environ.get("SCHEDA_REQUIRE_BROWSER"):
            pytest.fail("SCHEDA_REQUIRE_BROWSER is set and no chromium is installed: apt-get install chromium")
        pytest.skip("no Chromium here (apt-get install chromium)")
    url, _ = served_sweep
    page = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--disable-background-networking", "--no-first-run", "--virtual-time-budget=20000",
                           "--dump-dom", f"{url}/#timeseries"], capture_output=True, text=True, timeout=120)
    assert page.returncode == 0, page.stderr[-2000:]
    for nu in (0.3, 0.5, 0.7):
        assert f"schedule.nu={nu}" in page.stdout
