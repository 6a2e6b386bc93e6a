"""Notebooks 05, 06 and 08 in a real JupyterLab, driven from headless Chromium as a reader would
drive them.

JupyterLab runs on localhost from temporary copies of the notebooks; Chromium (Debian's package at
/usr/bin/chromium, which `make test` installs) opens them through Playwright:

* notebook 05: runs every cell from the "Run" menu, unticks FuseOps in the pass explorer and checks
  that the IR text and the graph the explorer shows both lose their fused groups
  (``screenshots/pass_explorer.png``);
* notebook 08, as stored (outputs kept, nothing run): the composability figure is on the page, an
  image that loaded (``screenshots/composability_figure.png``);
* notebook 06: runs every cell; the graph of the fused program is there, and in the FusionView's
  drawing of the whole program hovering a convolution shows its type in its tooltip, and a click
  on a fused group opens that group's kernel (``screenshots/fusion_hover.png``).

The test skips only when Chromium is missing (quoting why `make test` could not install it) or the
``playwright`` package is not importable.
"""

import json
import os
import pathlib
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "05_pass_explorer.ipynb"
CHROMIUM = pathlib.Path("/usr/bin/chromium")
INSTALL_LOG = REPO / ".venv" / "chromium-install.log"  # written by `make chromium` when it fails
SCREENSHOTS = pathlib.Path(__file__).resolve().parent / "screenshots"

# The launch flags for a closed network: without the background-networking ones Chromium keeps
# trying to reach Google's hosts. Playwright adds --headless and a fresh --user-data-dir itself.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SERVER_START_TIMEOUT_S = 60
UI_TIMEOUT_MS = 60_000


def _chromium_or_skip() -> str:
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return str(CHROMIUM)
    if INSTALL_LOG.is_file():
        reason = " ".join(INSTALL_LOG.read_text(errors="replace").split()) or "no output"
    else:
        reason = "`make test` has not tried (run `make chromium`, or apt-get install chromium)"
    pytest.skip(f"Chromium is not installed at {CHROMIUM} and could not be installed: {reason}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: pathlib.Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no server log: {exc})"


def _copy_notebook(src: pathlib.Path, dest_dir: pathlib.Path, keep_outputs: bool = False) -> str:
    """The notebook without its saved outputs (so every output the test sees comes from this run;
    with ``keep_outputs``, as stored, what a reader sees before running anything), pinned to the
    ``python3`` kernel so JupyterLab asks no question."""
    nb = json.loads(src.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and not keep_outputs:
            cell["outputs"] = []
            cell["execution_count"] = None
    nb["metadata"].pop("widgets", None)
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}
    (dest_dir / src.name).write_text(json.dumps(nb, indent=1))
    return src.name


def _clean_env(home: pathlib.Path) -> dict:
    """Only what the server and its kernel need: the interpreter running this test first on PATH
    (jupyter_client starts the ``python3`` kernel with ``sys.executable``), and per-run Jupyter
    directories so user settings, kernels and workspaces on this machine play no part."""
    bindir = pathlib.Path(sys.executable).parent
    dirs = {name: home / sub for name, sub in [
        ("HOME", "."), ("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"),
        ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
    ]}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    # No news or update check: their notification would sit over the page on a closed network.
    notes = dirs["JUPYTERLAB_SETTINGS_DIR"] / "@jupyterlab" / "apputils-extension"
    notes.mkdir(parents=True, exist_ok=True)
    (notes / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    # Every cell in the page, not only those scrolled into view.
    tracker = dirs["JUPYTERLAB_SETTINGS_DIR"] / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True, exist_ok=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env = {name: str(path) for name, path in dirs.items()}
    env.update(PATH=f"{bindir}{os.pathsep}/usr/local/bin:/usr/bin:/bin", LANG="C.UTF-8",
               PYTHONUNBUFFERED="1")
    return env


class LabServer:
    def __init__(self, root: pathlib.Path, home: pathlib.Path):
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.log_path = home / "server.log"
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=root, env=_clean_env(home), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def _request(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read() or b"null")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with status {self.proc.returncode} before "
                            f"answering; its log ends:\n{_tail(self.log_path)}")
            try:
                self._request("/api/status")
                return
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.25)
        pytest.fail(f"JupyterLab did not answer {self.base}/api/status within "
                    f"{SERVER_START_TIMEOUT_S} s; its log ends:\n{_tail(self.log_path)}")

    def stop(self) -> None:
        """Asks the server to shut down (it stops its kernels), then ends its process group."""
        if self.proc.poll() is None:
            try:
                self._request("/api/shutdown", method="POST")
                self.proc.wait(timeout=15)
            except (urllib.error.URLError, OSError, ValueError, subprocess.TimeoutExpired):
                pass
        for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=wait_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self._log.close()


@pytest.fixture(scope="module")
def sync_api():
    return pytest.importorskip(
        "playwright.sync_api",
        reason="the playwright package is not installed (it is in the `test` extra)")


@pytest.fixture(scope="module")
def chromium_path():
    return _chromium_or_skip()


@pytest.fixture(scope="module")
def lab(tmp_path_factory, chromium_path, sync_api):
    if not NOTEBOOK.is_file():
        pytest.fail(f"{NOTEBOOK.relative_to(REPO)} is missing (`make notebooks` writes it)")
    root = tmp_path_factory.mktemp("lab-root")
    home = tmp_path_factory.mktemp("lab-home")
    name = _copy_notebook(NOTEBOOK, root)
    server = LabServer(root, home)
    try:
        server.wait_ready()
        yield server, name
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(chromium_path, sync_api):
    pw = sync_api.sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=chromium_path, headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()


# JavaScript run in the page, on the first pass explorer of the notebook.
JS_VIEWS = """() => {
    const explorer = document.querySelector('.rb-pass-explorer');
    const ir = explorer && explorer.querySelector('.rb-ir-text');
    const graph = explorer && explorer.querySelector('.rb-graph');
    return {ir: ir ? ir.innerText : null, graph: graph ? graph.innerHTML : null};
}"""
# True once the status bar shows a kernel (not "No Kernel") and that it is idle: a Run All before
# then makes JupyterLab ask which kernel to start.
JS_KERNEL_IDLE = """() => [...document.querySelectorAll('.jp-StatusBar-TextItem')].some(
    e => /^(?!No Kernel).+ \\| Idle$/.test(e.textContent.trim()))"""
# Resolves once every code cell has run (each prompt shows a number, none shows "[*]"), or with
# the text of the first error output.
JS_ALL_RUN = """() => {
    const error = document.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]');
    if (error) return 'error: ' + error.innerText;
    const dialog = document.querySelector('.jp-Dialog');
    if (dialog) return 'a dialog opened: ' + dialog.innerText;
    const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
    return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent)) && 'done';
}"""
# Resolves once the explorer shows another program than ``before`` and no fused function.
JS_RERUN = """(before) => {
    const explorer = document.querySelector('.rb-pass-explorer');
    const ir = explorer.querySelector('.rb-ir-text');
    const graph = explorer.querySelector('.rb-graph');
    return ir.innerText !== before.ir && !ir.innerText.includes('Primitive=1')
        && graph.innerHTML !== before.graph;
}"""


def _clusters(svg_markup: str) -> int:
    """Graphviz draws each fused group as a subgraph whose <g> has class "cluster"."""
    return svg_markup.count('class="cluster"')


def test_pass_explorer_toggle_fuse_ops(lab, browser, request):
    server, name = lab
    context = browser.new_context(viewport={"width": 1440, "height": 1400})
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    SCREENSHOTS.mkdir(exist_ok=True)
    shot = SCREENSHOTS / "pass_explorer.png"
    try:
        page.goto(f"{server.base}/lab/tree/{name}?token={server.token}")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for()
        page.wait_for_function(JS_KERNEL_IDLE)

        # Run > Run All Cells, as a reader would.
        page.locator("#jp-MainMenu").get_by_role("menuitem", name="Run", exact=True).click()
        page.locator('.lm-Menu [data-command="runmenu:run-all"]').click()
        outcome = page.wait_for_function(JS_ALL_RUN).json_value()
        assert outcome == "done", f"running {name} failed: {outcome[:3000]}"

        explorer = page.locator(".rb-pass-explorer").first
        explorer.locator(".rb-ir-text").wait_for()
        explorer.locator(".rb-graph svg").first.wait_for()
        before = page.evaluate(JS_VIEWS)
        assert "Primitive=1" in before["ir"], (
            "with every pass on, the IR view should show fused Primitive functions:\n"
            + before["ir"][:2000])
        assert _clusters(before["graph"]) > 0, "the graph should draw fused groups as clusters"

        box = explorer.get_by_role("checkbox", name="FuseOps", exact=True)
        assert box.count() == 1, f"expected one FuseOps check box, found {box.count()}"
        assert box.is_checked()
        box.uncheck()

        # The explorer runs its passes again on its own; wait for both views to follow.
        page.wait_for_function(JS_RERUN, arg=before)
        after = page.evaluate(JS_VIEWS)
        assert "Primitive=1" not in after["ir"]
        assert after["ir"].strip(), "the IR view is empty after the re-run"
        assert "<svg" in after["graph"] and _clusters(after["graph"]) == 0, (
            f"without FuseOps the graph should have no fused clusters; it has "
            f"{_clusters(after['graph'])} (before: {_clusters(before['graph'])})")
        assert not box.is_checked()

        page.keyboard.press("Control+b")  # hide the file browser: a wider notebook
        explorer.scroll_into_view_if_needed()
        page.screenshot(path=str(shot), full_page=True)
        request.node.user_properties.append(("screenshot", str(shot)))
    except Exception:
        failed = SCREENSHOTS / "pass_explorer-failure.png"
        try:
            page.screenshot(path=str(failed), full_page=True)
        except Exception:  # the page may be gone; the server log below still helps
            pass
        print(f"screenshot at failure: {failed}\nJupyterLab log ends:\n{_tail(server.log_path)}")
        raise
    finally:
        context.close()


# ---------------------------------------------------------------------------------------------
# Notebooks 06 and 08: the figure, the graph, hovering a node, clicking a fused group

FUSION = REPO / "notebooks" / "06_fusion.ipynb"
COMPOSABILITY = REPO / "notebooks" / "08_composability.ipynb"

# The text of the <title> (the tooltip) of the graph node under the mouse, or null.
JS_HOVERED_TOOLTIP = """() => {
    const hovered = [...document.querySelectorAll(':hover')];
    const node = hovered.length ? hovered[hovered.length - 1].closest('g.node') : null;
    const title = node ? node.querySelector('title') : null;
    return title ? title.textContent : null;
}"""
# For the FusionView's program graph: the kernel the cluster with this id runs (read from the
# page's call -> kernel table and the dropdown's options, as the click handler reads them).
JS_KERNEL_OF_CLUSTER = """(id) => {
    const box = document.querySelector('.rb-program-graph');
    const k = parseInt(box.dataset.kernels.split(' ')[parseInt(id.slice(8))]);
    const select = box.closest('.rb-fusion-view').querySelector('.rb-group-select select');
    return select.options[k].value;
}"""
JS_SELECTED_KERNEL = """(name) => {
    const view = document.querySelector('.rb-fusion-view');
    const select = view.querySelector('.rb-group-select select');
    const label = [...view.querySelectorAll('.widget-html-content b')].map(b => b.textContent);
    return select.value === name && label.includes(name);
}"""


@pytest.fixture(scope="module")
def workbench_lab(tmp_path_factory, chromium_path, sync_api):
    for path in (FUSION, COMPOSABILITY):
        if not path.is_file():
            pytest.fail(f"{path.relative_to(REPO)} is missing (`make notebooks` writes it)")
    root = tmp_path_factory.mktemp("lab-root-workbench")
    home = tmp_path_factory.mktemp("lab-home-workbench")
    names = {"fusion": _copy_notebook(FUSION, root),
             "composability": _copy_notebook(COMPOSABILITY, root, keep_outputs=True)}
    server = LabServer(root, home)
    try:
        server.wait_ready()
        yield server, names
    finally:
        server.stop()


def _open(page, server, name):
    """Open ``name`` alone: a workspace of its own, reset (no tab of another test)."""
    page.goto(f"{server.base}/lab/workspaces/{pathlib.Path(name).stem}/tree/{name}"
              f"?reset&token={server.token}")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    page.wait_for_function(JS_KERNEL_IDLE)


def _run_all(page, name):
    page.locator("#jp-MainMenu").get_by_role("menuitem", name="Run", exact=True).click()
    page.locator('.lm-Menu [data-command="runmenu:run-all"]').click()
    outcome = page.wait_for_function(JS_ALL_RUN, timeout=300_000).json_value()
    assert outcome == "done", f"running {name} failed: {outcome[:3000]}"


def _failure_shot(page, server, stem):
    failed = SCREENSHOTS / f"{stem}-failure.png"
    try:
        page.screenshot(path=str(failed), full_page=True)
    except Exception:  # the page may be gone; the server log below still helps
        pass
    print(f"screenshot at failure: {failed}\nJupyterLab log ends:\n{_tail(server.log_path)}")


def test_composability_notebook_shows_its_figure(workbench_lab, browser, request):
    server, names = workbench_lab
    context = browser.new_context(viewport={"width": 1440, "height": 1400})
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    SCREENSHOTS.mkdir(exist_ok=True)
    shot = SCREENSHOTS / "composability_figure.png"
    try:
        _open(page, server, names["composability"])
        # the stored notebook, nothing run: the cell that makes the figure shows it
        cell = page.locator(".jp-CodeCell", has_text="figure = result.plot()")
        assert cell.count() == 1
        figure = cell.locator('.jp-OutputArea-output img[src^="data:image/png"]')
        figure.wait_for()
        size = figure.evaluate("img => [img.naturalWidth, img.naturalHeight]")
        assert size[0] > 300 and size[1] > 150, f"the figure is {size[0]} x {size[1]} pixels"
        page.keyboard.press("Control+b")
        figure.scroll_into_view_if_needed()
        page.screenshot(path=str(shot))
        request.node.user_properties.append(("screenshot", str(shot)))
    except Exception:
        _failure_shot(page, server, "composability_figure")
        raise
    finally:
        context.close()


def test_fusion_notebook_graph_hover_and_click(workbench_lab, browser, request):
    server, names = workbench_lab
    context = browser.new_context(viewport={"width": 1440, "height": 1400})
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    SCREENSHOTS.mkdir(exist_ok=True)
    shot = SCREENSHOTS / "fusion_hover.png"
    try:
        _open(page, server, names["fusion"])
        _run_all(page, names["fusion"])
        # the graph of the fused program (Graphviz's SVG, shown as an image)
        graph = page.locator(".jp-CodeCell", has_text="graph = rb.viz.to_dot(optimized)")
        assert graph.count() == 1
        drawn = page.locator('.jp-OutputArea-output img[src^="data:image/svg+xml"]')
        drawn.first.wait_for()
        # the FusionView draws the whole program inline: hover a convolution
        program = page.locator(".rb-fusion-view .rb-program-graph svg").first
        program.wait_for()
        conv = page.locator(".rb-program-graph g.node").filter(
            has=page.locator("title", has_text="nn.conv2d (n")).first
        conv.scroll_into_view_if_needed()
        conv.hover()
        tooltip = page.evaluate(JS_HOVERED_TOOLTIP)
        assert tooltip is not None, "no graph node under the mouse"
        assert tooltip.startswith("nn.conv2d (n") and "\ntype: Tensor[(1, " in tooltip, tooltip[:500]
        assert "relay: %n" in tooltip and "- data_layout=" in tooltip
        page.keyboard.press("Control+b")
        conv.hover()
        page.screenshot(path=str(shot))
        request.node.user_properties.append(("screenshot", str(shot)))
        # a click on a fused group's label opens its kernel: the dropdown and the group's line
        # follow, through the kernel
        cluster = page.locator(".rb-program-graph g.cluster").last
        wanted = page.evaluate(JS_KERNEL_OF_CLUSTER, cluster.get_attribute("id"))
        # (dispatched on the label: the edges drawn over a cluster would take a pointer's click)
        cluster.locator("text").first.dispatch_event("click")
        page.wait_for_function(JS_SELECTED_KERNEL, arg=wanted)
    except Exception:
        _failure_shot(page, server, "fusion_hover")
        raise
    finally:
        context.close()
