"""The console of one sidecar of a Redis fleet shows the runs another sidecar runs, live, and a
decision made on its page reaches the sidecar that runs the run."""

from __future__ import annotations

from selenium.webdriver.common.by import By

from cleveragents.tool import RunCompleted
from tests.console.conftest import Browser, StartConsole, start_detached, wait_for_end
from tests.console.test_console_pages import DEPLOY
from tests.redis_server import RedisServer


def test_a_run_on_another_sidecar_is_listed_shown_and_approved_from_this_ones_console(
    console_sidecar: StartConsole, browser: Browser, redis_server: RedisServer
) -> None:
    alpha, beta = (
        console_sidecar(f'event_store = "{redis_server.url}"\nsidecar_id = "{name}"\n')
        for name in ("alpha", "beta")
    )
    with alpha.client() as client:
        run_id = start_detached(client, "deploy from alpha", DEPLOY, run_id="on-alpha")

        browser.open(beta.url)
        row = f'#runs tr[data-run-id="{run_id}"]'
        browser.text_of(f"{row} .sidecar", "alpha")
        browser.text_of(row, "1 approval waiting")
        browser.text_of("#sidecar-id", "sidecar beta")

        browser.open(beta.run_page(run_id))
        browser.text_of("#run-sidecar", "runs on sidecar alpha")
        card = browser.element('#approvals .approval[data-call-id="d1"]')
        card.find_element(By.CSS_SELECTOR, ".decision-reason").send_keys("from beta's console")
        card.find_element(By.CSS_SELECTOR, "button.approve").click()
        browser.text_of("#run-state", "completed")  # followed through beta's mirror
        events = wait_for_end(client, run_id)  # on alpha, which ran it
    final = events[-1]
    assert isinstance(final, RunCompleted)
    assert final.result.tool_call_history[0].success
    browser.text_of("#timeline .approval_decided", "from beta's console")
    browser.text_of('.tool-call[data-call-id="d1"] pre.output', '"deployed": "prod"')
