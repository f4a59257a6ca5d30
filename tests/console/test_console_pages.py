"""The run console in a real browser (Debian's chromium): the list, a run's page, approvals,
cancel, what an observer sees, hostile tool output, and the screenshots of the docs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

from cleveragents.tool import ErrorKind, RunCancelled, RunCompleted
from tests.console.conftest import (
    Browser,
    StartConsole,
    screenshots_dir,
    start_detached,
    wait_for_end,
)
from tests.console.tools import HOSTILE

DEPLOY: list[dict[str, Any]] = [
    {"content": "Deploying as asked.", "tool_calls": [
        {"id": "d1", "name": "deploy", "arguments": {"target": "prod"}}]},
    {"content": "Deployed to prod."},
]  # fmt: skip
NAP: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 600}}]},
    {"content": "rested"},
]
PEOPLE = """
[clients.alice]
token_env = "TOKEN_ALICE"

[clients.olga]
token_env = "TOKEN_OLGA"
roles = ["observer"]

[clients.ada]
token_env = "TOKEN_ADA"
roles = ["approver"]
"""
TOKENS = {
    "alice": "alice-token-0123456789abcdef",
    "olga": "olga-token-0123456789abcdef",
    "ada": "ada-token-0123456789abcdef",
}


def test_the_list_shows_a_live_run_and_follows_it_to_its_end(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    sidecar = console_sidecar()
    with sidecar.client() as client:
        run_id = start_detached(client, "deploy the service", DEPLOY, run_id="listed")
        browser.open(sidecar.url)
        row = f'#runs tr[data-run-id="{run_id}"]'
        browser.text_of(row, "running")
        browser.text_of(row, "1 approval waiting")
        assert "deploy the service" in browser.element(row).text
        browser.text_of("#health", "serving")
        browser.text_of("#live-runs", "1 live run")

        client.decide_approval(run_id, "d1", approved=True, reason="from the test")
        browser.text_of(row, "completed")  # the page was not reloaded
    cells = browser.element(row).text
    assert "final_answer" in cells
    assert "approval waiting" not in cells


def test_a_run_approved_from_its_page_goes_on_and_the_record_says_who(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    sidecar = console_sidecar()
    with sidecar.client() as client:
        run_id = start_detached(client, "deploy", DEPLOY, run_id="approve-me")
        browser.open(sidecar.run_page(run_id))
        card = browser.element('#approvals .approval[data-call-id="d1"]')
        assert "deploy" in card.text
        card.find_element(By.CSS_SELECTOR, ".decision-reason").send_keys("looks right")
        card.find_element(By.CSS_SELECTOR, "button.approve").click()
        browser.text_of("#run-state", "completed")
        events = wait_for_end(client, run_id)
    final = events[-1]
    assert isinstance(final, RunCompleted)
    record = final.result.tool_call_history[0]
    assert (record.tool_name, record.success, dict(record.output)) == (
        "deploy", True, {"deployed": "prod"},
    )  # fmt: skip
    browser.text_of("#timeline .approval_decided", "approved by default (rpc)")
    browser.text_of("#timeline .approval_decided", "looks right")
    browser.text_of('.tool-call[data-call-id="d1"] .call-status', "ok")
    assert not browser.elements("#approvals .approval")


def test_a_denial_from_the_page_is_in_the_runs_record(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    sidecar = console_sidecar()
    with sidecar.client() as client:
        run_id = start_detached(client, "deploy", DEPLOY, run_id="deny-me")
        browser.open(sidecar.run_page(run_id))
        card = browser.element('#approvals .approval[data-call-id="d1"]')
        card.find_element(By.CSS_SELECTOR, ".decision-reason").send_keys("not on a Friday")
        card.find_element(By.CSS_SELECTOR, "button.deny").click()
        browser.text_of("#run-state", "completed")
        events = wait_for_end(client, run_id)
    final = events[-1]
    assert isinstance(final, RunCompleted)
    record = final.result.tool_call_history[0]
    assert record.error_kind is ErrorKind.DENIED
    assert record.error == "denied by rpc: not on a Friday"
    browser.text_of('.tool-call[data-call-id="d1"] .call-status', "denied")
    browser.text_of('.tool-call[data-call-id="d1"] pre.error', "not on a Friday")


def test_cancel_from_the_page_ends_the_run(console_sidecar: StartConsole, browser: Browser) -> None:
    sidecar = console_sidecar()
    with sidecar.client() as client:
        run_id = start_detached(client, "nap", NAP, run_id="cancel-me")
        browser.open(sidecar.run_page(run_id))
        browser.text_of('.tool-call[data-call-id="nap"] .call-status', "running")
        browser.element("#cancel-reason").send_keys("enough")
        browser.element("#cancel-run").click()
        browser.text_of("#run-state", "cancelled")
        events = wait_for_end(client, run_id)
        state = client.get_run(run_id).state
    final = events[-1]
    assert isinstance(final, RunCancelled)
    assert final.reason == "enough"
    assert state == "cancelled"
    browser.text_of("#stop-reason", "cancelled")
    assert not browser.elements("#cancel-run")


def test_an_observer_sees_a_run_and_no_button_and_an_approver_no_cancel(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    sidecar = console_sidecar(PEOPLE, tokens=TOKENS)
    with sidecar.client("alice") as alice:
        run_id = start_detached(alice, "deploy", DEPLOY, run_id="alices")

    browser.open(sidecar.run_page(run_id))
    browser.sign_in(TOKENS["olga"])
    browser.text_of("#who", "olga (observer)")
    card = browser.element('#approvals .approval[data-call-id="d1"]')
    browser.text_of("#run-owner", "alice")
    browser.element('.tool-call[data-call-id="d1"]')
    assert not browser.elements("button.approve, button.deny, #cancel-run")
    assert "deploy" in card.text

    browser.element("#sign-out").click()
    browser.sign_in(TOKENS["ada"])
    browser.open(sidecar.run_page(run_id))
    browser.element('#approvals .approval[data-call-id="d1"] button.approve')
    assert browser.elements("button.deny")
    assert not browser.elements("#cancel-run")


def test_an_identity_without_a_role_lists_only_its_own_runs(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    sidecar = console_sidecar(PEOPLE + '\n[clients.bob]\ntoken_env = "TOKEN_BOB"\n',
                              tokens={**TOKENS, "bob": "bob-token-0123456789abcdef"})  # fmt: skip
    with sidecar.client("alice") as alice, sidecar.client("bob") as bob:
        start_detached(alice, "alice's", NAP, run_id="of-alice")
        start_detached(bob, "bob's", NAP, run_id="of-bob")
    browser.open(sidecar.url)
    browser.sign_in("bob-token-0123456789abcdef")
    browser.element('#runs tr[data-run-id="of-bob"]')
    assert not browser.elements('#runs tr[data-run-id="of-alice"]')
    browser.open(sidecar.run_page("of-alice"))
    browser.text_of("#banner", "no run with id 'of-alice'")


def test_a_wrong_token_is_refused_on_the_page(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    sidecar = console_sidecar(PEOPLE, tokens=TOKENS)
    browser.open(sidecar.url)
    field = browser.element("#token")
    field.send_keys("not-a-token-anyone-has")
    browser.element("#sign-in-button").click()
    browser.text_of("#sign-in-error", "does not know that token")
    assert not browser.elements("#runs")


def test_tool_output_with_markup_shows_as_text_and_runs_nothing(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    sidecar = console_sidecar()
    script: list[dict[str, Any]] = [
        {"content": HOSTILE, "tool_calls": [
            {"id": "w", "name": "read_web", "arguments": {"url": HOSTILE}}]},
        {"content": "The page said: " + HOSTILE},
    ]  # fmt: skip
    with sidecar.client() as client:
        client.run_tool_loop(HOSTILE, script=script, run_id="hostile")
    browser.open(sidecar.url)
    browser.text_of('#runs tr[data-run-id="hostile"] .prompt', "<script>")
    browser.open(sidecar.run_page("hostile"))
    output = browser.text_of('.tool-call[data-call-id="w"] pre.output', "onerror")
    browser.text_of("#result pre.final", "The page said: <script>")
    assert '<script>window.__pwned = \\"script\\"' in output
    assert "<b>bold?</b>" in browser.element("#run-header pre.prompt").text
    main = browser.driver.find_element(By.ID, "main")
    assert main.find_elements(By.CSS_SELECTOR, "script, img, b") == []
    assert browser.script("return window.__pwned === undefined")
    assert browser.alert_text() is None
    assert browser.script("return document.scripts.length") == 1  # console.js alone


def test_a_secret_a_tool_returns_reaches_the_page_redacted(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    token = "shared-token-the-page-must-never-show"
    sidecar = console_sidecar('auth_token_env = "TOKEN_DEFAULT"\n', tokens={"default": token})
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "l", "name": "leak", "arguments": {}}]},
        {"content": "ok"},
    ]
    with sidecar.client("default") as client:
        client.run_tool_loop("leak it", script=script, run_id="leaky")
    browser.open(sidecar.run_page("leaky"))
    browser.sign_in(token)
    browser.text_of('.tool-call[data-call-id="l"] pre.output', "[redacted]")
    assert token not in browser.script("return document.documentElement.outerHTML")


def test_calls_that_ran_together_are_drawn_side_by_side_on_the_time_axis(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    sidecar = console_sidecar()
    script: list[dict[str, Any]] = [
        {"tool_calls": [
            {"id": "a", "name": "pause", "arguments": {"seconds": 0.3}},
            {"id": "b", "name": "pause", "arguments": {"seconds": 0.3}}]},
        {"tool_calls": [{"id": "c", "name": "echo", "arguments": {"text": "after"}}]},
        {"content": "done"},
    ]  # fmt: skip
    with sidecar.client() as client:
        client.run_tool_loop("two at once", script=script, run_id="parallel")
    browser.open(sidecar.run_page("parallel"))
    browser.text_of("#run-state", "completed")
    browser.element('#time-axis .bar[data-call-id="c"]')
    lanes = browser.script(
        "return [...document.querySelectorAll('#time-axis .lane')].map((lane) =>"
        " [...lane.querySelectorAll('.bar')].map((bar) => [bar.dataset.callId,"
        " parseFloat(bar.style.left), parseFloat(bar.style.width)]))"
    )
    where = {call: (lane, left, width) for lane, bars in enumerate(lanes)
             for call, left, width in bars}  # fmt: skip
    assert where["a"][0] != where["b"][0]  # one lane each: they overlapped
    a, b = where["a"], where["b"]
    assert a[1] < b[1] + b[2]
    assert b[1] < a[1] + a[2]
    assert where["c"][1] >= max(a[1] + a[2], b[1] + b[2]) - 0.5  # after both
    browser.text_of('.tool-call[data-call-id="a"] .duration', "ms")


def test_the_model_types_on_the_page_while_it_streams(
    console_sidecar: StartConsole, browser: Browser
) -> None:
    sidecar = console_sidecar()
    words = " ".join(f"word{n}" for n in range(300))
    with sidecar.client() as client:
        run_id = start_detached(
            client, "type", [DEPLOY[0], {"content": words}], run_id="typing", profile="typing"
        )
        browser.open(sidecar.run_page(run_id))
        browser.element('#approvals .approval[data-call-id="d1"] button.approve').click()
        typed = browser.text_of("#timeline pre.model-text.typing", "word1")
        browser.text_of("#run-state", "completed")
    assert "word299" not in typed  # seen mid-answer
    assert browser.elements("#timeline pre.model-text.typing") == []
    browser.text_of("#result pre.final", "word299")


def test_the_docs_screenshots_of_the_list_and_a_run_page(
    console_sidecar: StartConsole, browser: Browser, tmp_path: Path
) -> None:
    sidecar = console_sidecar()
    inspect: list[dict[str, Any]] = [
        {"content": "I will read the status page and the deploy log side by side.",
         "usage": {"input_tokens": 412, "output_tokens": 38},
         "tool_calls": [
             {"id": "status", "name": "read_web", "arguments": {"url": "https://status.example"}},
             {"id": "log", "name": "pause", "arguments": {"seconds": 0.35}},
             {"id": "grep", "name": "pause", "arguments": {"seconds": 0.2}}]},
        {"content": "Both are fine; one more check.",
         "usage": {"input_tokens": 640, "output_tokens": 21},
         "tool_calls": [{"id": "echo", "name": "echo", "arguments": {"text": "healthy"}}]},
        {"content": "The service is healthy and the last deploy went through.",
         "usage": {"input_tokens": 702, "output_tokens": 17}},
    ]  # fmt: skip
    with sidecar.client() as client:
        client.run_tool_loop("Is the service healthy?", script=inspect, run_id="check-health",
                             profile="typing")  # fmt: skip
        start_detached(client, "Deploy the release to prod", DEPLOY, run_id="deploy-prod")
        start_detached(client, "Re-index the archive overnight", NAP, run_id="reindex")
        failing: list[dict[str, Any]] = [
            {"tool_calls": [{"id": "x", "name": "nope", "arguments": {}}]},
            {"content": "The tool was missing."},
        ]
        client.run_tool_loop("Call a tool that is gone", script=failing, run_id="missing-tool")
        into = screenshots_dir(tmp_path)
        browser.open(sidecar.url)
        browser.text_of('#runs tr[data-run-id="deploy-prod"]', "1 approval waiting")
        browser.text_of('#runs tr[data-run-id="missing-tool"]', "1 failed")
        browser.screenshot(into / "console-runs.png")
        browser.open(sidecar.run_page("check-health"))
        browser.text_of("#run-state", "completed")
        browser.element('#time-axis .bar[data-call-id="echo"]')
        browser.driver.set_window_size(1280, 1500)
        try:
            browser.screenshot(into / "console-run.png")
        finally:
            browser.driver.set_window_size(1280, 900)
    for name in ("console-runs.png", "console-run.png"):
        data = (into / name).read_bytes()
        assert data.startswith(b"\x89PNG")
        assert len(data) > 10_000
