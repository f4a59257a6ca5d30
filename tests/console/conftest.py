"""The run console's tests: real ``cleveragents-sidecar serve`` processes with the console on,
and Debian's ``chromium`` driven through its ``chromedriver`` by Selenium (no browser is
downloaded). Every wait is for an element or an event (``WebDriverWait``), never a sleep."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from cleveragents.client import SidecarClient
from tests.console.tools import TOKEN_ENV

#: Where the docs' screenshots go when ``make console-screenshots`` asks for them.
SCREENSHOTS_ENV = "CONSOLE_SCREENSHOTS_DIR"
#: How long a wait for the page may take before the test fails (a loaded machine is slow).
WAIT_S = 30.0
_LISTENING = "cleveragents-sidecar listening on "
_CONSOLE = "console at "

#: The sidecars' settings besides the test's own: the console on a free port, the tools of
#: tests/console/tools.py, approvals that wait for a person, a scripted profile that types.
BASE_CONFIG = """
console_listen = "127.0.0.1:0"
tool_modules = ["tests.console.tools:tools"]
approval_timeout_unattended_s = 600
approval_timeout_s = 600
file_tools = false
"""
#: The tables every sidecar has, after the test's own settings (a TOML key after a table
#: belongs to that table).
PROFILES = """
[profiles.typing]
kind = "scripted"
model = "script-typing"
stream_delay = 0.02
"""


@dataclass
class ConsoleSidecar:
    """A ``serve`` process with its console: its gRPC address and the console's URL."""

    process: subprocess.Popen[str]
    address: str
    url: str
    tokens: dict[str, str] = field(default_factory=dict)

    def client(self, identity: str = "") -> SidecarClient:
        """A gRPC client of this sidecar, as ``identity`` (its token; ``""``: no token)."""
        return SidecarClient(self.address, token=self.tokens.get(identity))

    def run_page(self, run_id: str) -> str:
        return f"{self.url}#/runs/{run_id}"


StartConsole = Callable[..., ConsoleSidecar]


@pytest.fixture
def console_sidecar(tmp_path: Path) -> Iterator[StartConsole]:
    """``console_sidecar(extra_toml="", env={}, tokens={})``: a sidecar process with the
    console on; ``tokens`` (identity -> token) are put in the environment for the config's
    ``[clients.NAME]`` ``token_env`` (``TOKEN_<NAME>``) and the shared token
    (``auth_token_env = "TOKEN_DEFAULT"``) to read. Stopped after the test."""
    started: list[subprocess.Popen[str]] = []

    def start(
        extra_toml: str = "",
        *,
        env: dict[str, str] | None = None,
        tokens: dict[str, str] | None = None,
    ) -> ConsoleSidecar:
        config = tmp_path / f"sidecar-{len(started)}.toml"
        config.write_text(BASE_CONFIG + extra_toml + PROFILES, encoding="utf-8")
        environment = dict(os.environ, **(env or {}))
        for name, token in (tokens or {}).items():
            environment[f"TOKEN_{name.upper()}"] = token
        if tokens and "default" in tokens:
            environment[TOKEN_ENV] = tokens["default"]
        command = [
            sys.executable, "-m", "cleveragents.sidecar.cli", "serve", "--config", str(config),
            "--listen", "127.0.0.1:0", "--log-level", "warning",
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment)
        started.append(process)
        assert process.stdout is not None
        listening = process.stdout.readline().strip()
        assert listening.startswith(_LISTENING), listening
        console = process.stdout.readline().strip()
        assert console.startswith(_CONSOLE), console
        return ConsoleSidecar(
            process,
            listening.removeprefix(_LISTENING),
            console.removeprefix(_CONSOLE),
            dict(tokens or {}),
        )

    yield start
    for process in started:
        process.terminate()
    for process in started:
        process.wait(15)


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.fail(
            "the console's browser tests need Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver; make test installs them)"
        )
    return browser, driver


@pytest.fixture(scope="session")
def _driver() -> Iterator[WebDriver]:
    """One headless Chromium per test process (each test's console is an origin of its own:
    nothing a page kept carries over)."""
    browser, driver = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--window-size=1280,900", "--force-device-scale-factor=1", "--lang=en-GB",
    ):  # fmt: skip
        options.add_argument(argument)
    # An alert left open stays open for the test to find, rather than being dismissed.
    options.set_capability("unhandledPromptBehavior", "ignore")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    yield chrome
    chrome.quit()


@dataclass
class Browser:
    """The test's browser: pages of a console, and waits for what they show."""

    driver: WebDriver

    def open(self, url: str) -> None:
        self.driver.get(url)

    def until(self, what: Callable[[WebDriver], Any], message: str = "") -> Any:
        """Wait (for an element, a text) until ``what`` gives something true; that. An element
        the page replaced while it was read is read again at the next poll."""
        wait = WebDriverWait(
            self.driver, WAIT_S, poll_frequency=0.1,
            ignored_exceptions=(StaleElementReferenceException,),
        )  # fmt: skip
        return wait.until(what, message)

    def element(self, css: str) -> WebElement:
        """The element ``css`` selects, once it exists."""
        found = self.until(lambda d: d.find_elements(By.CSS_SELECTOR, css), f"no {css}")
        return found[0]  # type: ignore[no-any-return]

    def elements(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text_of(self, css: str, wanted: str) -> str:
        """Wait until the element ``css`` selects shows ``wanted``; its text."""

        def shows(driver: WebDriver) -> str | bool:
            for found in driver.find_elements(By.CSS_SELECTOR, css):
                text = found.text
                if wanted in text:
                    return text
            return False

        return self.until(shows, f"{css} never showed {wanted!r}")  # type: ignore[no-any-return]

    def sign_in(self, token: str) -> None:
        """Sign in on the page's form (shown when the console needs a token)."""
        field_ = self.element("#token")
        self.until(lambda d: field_.is_displayed(), "the sign-in form is not shown")
        field_.send_keys(token)
        self.element("#sign-in-button").click()
        self.element("#who")
        self.until(lambda d: "signed in as" in d.find_element(By.ID, "who").text)

    def script(self, source: str, *args: Any) -> Any:
        return self.driver.execute_script(source, *args)

    def alert_text(self) -> str | None:
        """The text of an alert the page opened, if one is open."""
        try:
            return self.driver.switch_to.alert.text
        except NoAlertPresentException:
            return None

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(path))


@pytest.fixture
def browser(_driver: WebDriver) -> Iterator[Browser]:
    """The browser, on a blank page before and after the test."""
    _driver.get("about:blank")
    yield Browser(_driver)
    _driver.get("about:blank")


def start_detached(
    client: SidecarClient, prompt: str, script: Sequence[dict[str, Any]], **options: Any
) -> str:
    """Start a detached run and return its id once it started (its stream is let go)."""
    for streamed in client.stream_tool_loop(prompt, script=list(script), detach=True, **options):
        return streamed.run_id
    raise AssertionError("the run sent no event")


def wait_for_end(client: SidecarClient, run_id: str) -> list[Any]:
    """Every event of the run, once it ended (read by following it to its end)."""
    return [streamed.event for streamed in client.watch(run_id)]


def screenshots_dir(tmp_path: Path) -> Path:
    """Where a test's screenshots go: the docs' folder when asked for, else the test's own."""
    chosen = os.environ.get(SCREENSHOTS_ENV)
    return Path(chosen) if chosen else tmp_path
