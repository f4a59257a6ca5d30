"""ToolCallingRuntime: the loop's five steps, counting, history, concurrency and usage."""

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any, cast

from cleveragents.tool import (
    ErrorKind,
    LLMRequest,
    LLMResponse,
    Message,
    Role,
    StopReason,
    ToolActorContext,
    ToolCall,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRouter,
    ToolRegistry,
    ToolSpec,
    Usage,
)

from .conftest import (
    always_asks,
    asks,
    final,
    make_runtime,
    recording_llm,
    tool_message_payload,
)

ADD_SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "description": "The first addend."},
        "b": {"type": "integer", "description": "The second addend."},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}


# -- step 1: tool schemas ----------------------------------------------------------------------


async def test_without_router_tools_are_sent_as_name_description_input_schema(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm([final()])

    await make_runtime(registry, llm).arun_tool_loop("hi")

    assert llm.requests[0].tools == [
        {"name": "add", "description": "Add two integers.", "input_schema": ADD_SCHEMA},
        {"name": "echo", "description": "Return the inputs.", "input_schema": {"type": "object"}},
        {"name": "boom", "description": "Always fails.", "input_schema": {"type": "object"}},
    ]


async def test_with_a_router_tools_are_sent_in_the_provider_format(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm([final()])
    router = ToolCallRouter("openai")

    await make_runtime(registry, llm, router=router).arun_tool_loop("hi")

    assert llm.requests[0].tools == router.tool_schemas(registry.specs())
    assert llm.requests[0].tools[0] == {
        "type": "function",
        "function": {"name": "add", "description": "Add two integers.", "parameters": ADD_SCHEMA},
    }


async def test_the_same_tool_schemas_are_sent_on_every_iteration(registry: ToolRegistry) -> None:
    llm = recording_llm([asks(ToolCall("c1", "add", {"a": 1, "b": 2})), final()])

    await make_runtime(registry, llm).arun_tool_loop("hi")

    assert llm.calls == 2
    assert llm.requests[0].tools == llm.requests[1].tools


async def test_context_keys_are_not_in_the_schema_shown_to_the_model() -> None:
    registry = ToolRegistry()

    @registry.tool
    def look(
        path: str, sandbox_root: str = "", resource_bindings: dict[str, Any] | None = None
    ) -> None:
        pass

    llm = recording_llm([final()])

    await make_runtime(registry, llm).arun_tool_loop("hi")

    schema = llm.requests[0].tools[0]["input_schema"]
    assert list(schema["properties"]) == ["path"]
    assert schema["required"] == ["path"]


# -- step 2: the conversation ------------------------------------------------------------------


async def test_first_request_holds_only_the_user_prompt(registry: ToolRegistry) -> None:
    llm = recording_llm([final()])

    await make_runtime(registry, llm).arun_tool_loop("What is 1 + 2?")

    assert llm.requests[0].messages == [Message(Role.USER, "What is 1 + 2?")]
    assert llm.requests[0].iteration == 1


async def test_conversation_carries_assistant_tool_calls_and_tool_results_in_order(
    registry: ToolRegistry,
) -> None:
    first = ToolCall("c1", "add", {"a": 1, "b": 2})
    second = ToolCall("c2", "echo", {"x": "y"})
    llm = recording_llm([asks(first, second, content="Let me compute."), final("3")])

    await make_runtime(registry, llm).arun_tool_loop("What is 1 + 2?")

    user, assistant, result_1, result_2 = llm.requests[1].messages
    assert user == Message(Role.USER, "What is 1 + 2?")
    assert assistant.role is Role.ASSISTANT
    assert assistant.content == "Let me compute."
    assert list(assistant.tool_calls) == [first, second]
    assert (result_1.role, result_1.tool_call_id, result_1.is_error) == (Role.TOOL, "c1", False)
    assert tool_message_payload(result_1) == {"result": 3}
    assert (result_2.role, result_2.tool_call_id, result_2.is_error) == (Role.TOOL, "c2", False)
    assert tool_message_payload(result_2) == {"x": "y"}
    assert llm.requests[1].iteration == 2


async def test_conversation_grows_across_iterations(registry: ToolRegistry) -> None:
    llm = recording_llm(
        [
            asks(ToolCall("c1", "add", {"a": 1, "b": 1})),
            asks(ToolCall("c2", "add", {"a": 2, "b": 2})),
            final(),
        ]
    )

    await make_runtime(registry, llm).arun_tool_loop("hi")

    assert [len(r.messages) for r in llm.requests] == [1, 3, 5]
    roles = [m.role for m in llm.requests[2].messages]
    assert roles == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT, Role.TOOL]
    assert [m.tool_call_id for m in llm.requests[2].messages if m.role is Role.TOOL] == ["c1", "c2"]


async def test_system_prompt_opens_the_conversation(registry: ToolRegistry) -> None:
    llm = recording_llm([final()])

    await make_runtime(registry, llm, system_prompt="You are terse.").arun_tool_loop("hi")

    assert llm.requests[0].messages == [
        Message(Role.SYSTEM, "You are terse."),
        Message(Role.USER, "hi"),
    ]


async def test_failures_are_fed_back_to_the_model_as_error_json(registry: ToolRegistry) -> None:
    llm = recording_llm([asks(ToolCall("c1", "boom", {})), final()])

    await make_runtime(registry, llm).arun_tool_loop("hi")

    tool_message = llm.requests[1].messages[-1]
    assert tool_message.role is Role.TOOL
    assert tool_message.tool_call_id == "c1"
    assert tool_message.is_error is True
    assert tool_message_payload(tool_message) == {"error": "RuntimeError: kaboom"}


# -- step 3: records ---------------------------------------------------------------------------


async def test_records_are_appended_to_the_context_history_and_the_result(
    registry: ToolRegistry,
) -> None:
    earlier = ToolCallRecord("old", {}, {}, 1.0, True, None, 1)
    context = ToolActorContext(plan_id="p", tool_call_history=[earlier])
    llm = recording_llm(
        [
            asks(ToolCall("c1", "add", {"a": 1, "b": 2})),
            asks(ToolCall("c2", "echo", {"k": "v"})),
            final(),
        ]
    )

    result = await make_runtime(registry, llm).arun_tool_loop("hi", context)

    assert [r.call_id for r in result.tool_call_history] == ["c1", "c2"]
    assert context.tool_call_history == [earlier, *result.tool_call_history]


async def test_context_history_is_up_to_date_when_the_model_is_next_called(
    registry: ToolRegistry,
) -> None:
    context = ToolActorContext()
    seen: list[list[str]] = []

    def respond(request: LLMRequest) -> LLMResponse:
        seen.append([r.call_id for r in context.tool_call_history])
        if request.iteration == 1:
            return asks(ToolCall("c1", "add", {"a": 1, "b": 2}))
        return final()

    await make_runtime(registry, recording_llm(respond)).arun_tool_loop("hi", context)

    assert seen == [[], ["c1"]]


async def test_records_carry_the_llm_call_id_and_the_threaded_inputs(
    registry: ToolRegistry,
) -> None:
    context = ToolActorContext(sandbox_root="/srv/box", resource_bindings={"db": "pg://x"})
    llm = recording_llm([asks(ToolCall("toolu_42", "echo", {"q": 1})), final()])

    result = await make_runtime(registry, llm).arun_tool_loop("hi", context)

    (record,) = result.tool_call_history
    assert record.call_id == "toolu_42"
    assert record.tool_name == "echo"
    assert record.inputs == {
        "q": 1,
        "sandbox_root": "/srv/box",
        "resource_bindings": {"db": "pg://x"},
    }
    assert record.output == record.inputs


async def test_every_tool_gets_the_context_keys() -> None:
    registry = ToolRegistry()
    received: list[tuple[str, Any, Any]] = []

    def by_dict(inputs: Mapping[str, Any]) -> None:
        received.append(("by_dict", inputs.get("sandbox_root"), inputs.get("resource_bindings")))

    registry.register(ToolSpec("by_dict"), by_dict)

    @registry.tool
    async def by_kwargs(
        sandbox_root: str = "", resource_bindings: dict[str, Any] | None = None
    ) -> None:
        received.append(("by_kwargs", sandbox_root, resource_bindings))

    context = ToolActorContext(sandbox_root="/srv/box", resource_bindings={"db": "pg://x"})
    llm = recording_llm(
        [asks(ToolCall("c1", "by_dict", {}), ToolCall("c2", "by_kwargs", {})), final()]
    )

    await make_runtime(registry, llm).arun_tool_loop("hi", context)

    assert sorted(received) == [
        ("by_dict", "/srv/box", {"db": "pg://x"}),
        ("by_kwargs", "/srv/box", {"db": "pg://x"}),
    ]


async def test_duration_ms_reflects_the_tool_running_time() -> None:
    registry = ToolRegistry()

    @registry.tool
    async def nap() -> str:
        await asyncio.sleep(0.05)
        return "rested"

    llm = recording_llm([asks(ToolCall("c1", "nap", {})), final()])
    before = time.time()

    result = await make_runtime(registry, llm).arun_tool_loop("hi")
    after = time.time()

    (record,) = result.tool_call_history
    assert 45 <= record.duration_ms <= (after - before) * 1000  # within the run, however slow
    assert before <= record.started_at <= after


# -- step 4: final answer ----------------------------------------------------------------------


async def test_final_answer_returns_its_content_and_the_whole_history(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm(
        [
            asks(ToolCall("c1", "add", {"a": 1, "b": 2}), content="thinking"),
            asks(ToolCall("c2", "add", {"a": 3, "b": 4})),
            final("The answers are 3 and 7."),
        ]
    )

    result = await make_runtime(registry, llm, max_iterations=5).arun_tool_loop("hi", run_id="r-1")

    assert result.content == "The answers are 3 and 7."
    assert [r.output for r in result.tool_call_history] == [{"result": 3}, {"result": 7}]
    assert result.iterations == 3
    assert result.terminated_by_limit is False
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert result.run_id == "r-1"


async def test_immediate_final_answer_makes_one_llm_call_and_no_tool_call(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm([final("Nothing to do.")])

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert llm.calls == 1
    assert result.content == "Nothing to do."
    assert result.tool_call_history == ()
    assert result.iterations == 1


async def test_final_answer_on_the_last_allowed_iteration_is_not_a_limit_stop(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm([asks(ToolCall("c1", "add", {"a": 1, "b": 2})), final("3")])

    result = await make_runtime(registry, llm, max_iterations=2).arun_tool_loop("hi")

    assert result.iterations == 2
    assert result.terminated_by_limit is False
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert result.content == "3"


# -- step 5 and counting: max_iterations -------------------------------------------------------


async def test_max_iterations_calls_the_llm_n_times_and_runs_n_rounds_of_tools(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm(always_asks("add", {"a": 1, "b": 1}))

    result = await make_runtime(registry, llm, max_iterations=3).arun_tool_loop("loop forever")

    assert llm.calls == 3
    assert [r.iteration for r in llm.requests] == [1, 2, 3]
    assert [(r.iteration, r.output) for r in result.tool_call_history] == [
        (1, {"result": 2}),
        (2, {"result": 2}),
        (3, {"result": 2}),
    ]
    assert result.iterations == 3
    assert result.content == "step 1\nstep 2\nstep 3"
    assert result.terminated_by_limit is True
    assert result.stop_reason is StopReason.MAX_ITERATIONS


async def test_max_iterations_of_one_runs_one_round(registry: ToolRegistry) -> None:
    llm = recording_llm(always_asks("add", {"a": 1, "b": 1}))

    result = await make_runtime(registry, llm, max_iterations=1).arun_tool_loop("hi")

    assert llm.calls == 1
    assert [r.call_id for r in result.tool_call_history] == ["call-1"]
    assert result.iterations == 1
    assert result.terminated_by_limit is True


async def test_records_carry_the_iteration_of_the_llm_call_that_requested_them(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm(
        [
            asks(ToolCall("a", "add", {"a": 1, "b": 1}), ToolCall("b", "echo", {})),
            asks(ToolCall("c", "echo", {})),
            asks(ToolCall("d", "nope", {}), ToolCall("e", "boom", {})),
            final(),
        ]
    )

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert [(r.call_id, r.iteration) for r in result.tool_call_history] == [
        ("a", 1),
        ("b", 1),
        ("c", 2),
        ("d", 3),
        ("e", 3),
    ]
    assert result.iterations == 4


async def test_partial_content_joins_assistant_texts_with_newlines_skipping_empty_ones(
    registry: ToolRegistry,
) -> None:
    call = ToolCall("c", "echo", {})
    llm = recording_llm([asks(call, content="First."), asks(call), asks(call, content="Third.")])

    result = await make_runtime(registry, llm, max_iterations=3).arun_tool_loop("hi")

    assert result.content == "First.\nThird."
    assert result.terminated_by_limit is True


async def test_partial_content_is_empty_when_the_model_said_nothing(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm([asks(ToolCall("c", "echo", {}))])

    result = await make_runtime(registry, llm, max_iterations=1).arun_tool_loop("hi")

    assert result.content == ""


# -- failures are records and the loop goes on -------------------------------------------------


async def test_unknown_tool_becomes_failed_record_and_loop_continues(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm([asks(ToolCall("c1", "teleport", {"to": "mars"})), final("Sorry.")])

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    (record,) = result.tool_call_history
    assert record.success is False
    assert record.error_kind is ErrorKind.UNKNOWN_TOOL
    assert record.error is not None
    assert "'teleport'" in record.error
    assert llm.calls == 2
    fed_back = llm.requests[1].messages[-1]
    assert fed_back.is_error is True
    assert tool_message_payload(fed_back) == {"error": record.error}
    assert result.content == "Sorry."
    assert result.stop_reason is StopReason.FINAL_ANSWER


async def test_raising_handler_becomes_failed_record_and_loop_continues(
    registry: ToolRegistry,
) -> None:
    llm = recording_llm(
        [asks(ToolCall("c1", "boom", {})), asks(ToolCall("c2", "add", {"a": 2, "b": 2})), final()]
    )

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    failed, succeeded = result.tool_call_history
    assert (failed.success, failed.error, failed.error_kind) == (
        False,
        "RuntimeError: kaboom",
        ErrorKind.EXCEPTION,
    )
    assert (succeeded.success, succeeded.output) == (True, {"result": 4})
    assert tool_message_payload(llm.requests[1].messages[-1]) == {"error": "RuntimeError: kaboom"}
    assert result.iterations == 3


async def test_invalid_arguments_are_fed_back_naming_the_field(registry: ToolRegistry) -> None:
    llm = recording_llm([asks(ToolCall("c1", "add", {"a": 1, "b": "two"})), final()])

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    (record,) = result.tool_call_history
    assert record.error_kind is ErrorKind.INVALID_ARGUMENTS
    assert (
        record.error
        == "invalid arguments for tool 'add': at 'b': \"two\" is not of type \"integer\""
    )
    assert tool_message_payload(llm.requests[1].messages[-1]) == {"error": record.error}


async def test_unparseable_arguments_from_the_router_are_fed_back_and_the_loop_continues(
    registry: ToolRegistry,
) -> None:
    broken = ToolCall("c1", "add", cast(Any, '{"a": 1'))
    llm = recording_llm([asks(broken), asks(ToolCall("c2", "add", {"a": 1, "b": 2})), final("3")])
    runtime = make_runtime(registry, llm, router=ToolCallRouter("openai"))

    result = await runtime.arun_tool_loop("hi")

    failed, fixed = result.tool_call_history
    assert failed.success is False
    assert failed.error_kind is ErrorKind.INVALID_ARGUMENTS
    assert failed.error is not None
    assert failed.error.startswith("invalid arguments for tool 'add': arguments are not valid JSON")
    fed_back = llm.requests[1].messages[-1]
    assert (fed_back.tool_call_id, fed_back.is_error) == ("c1", True)
    assert tool_message_payload(fed_back) == {"error": failed.error}
    assert fixed.output == {"result": 3}
    assert result.content == "3"


async def test_json_text_arguments_are_parsed_without_a_router(registry: ToolRegistry) -> None:
    as_text = ToolCall("c1", "add", cast(Any, '{"a": 5, "b": 6}'))
    llm = recording_llm([asks(as_text), final()])

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert result.tool_call_history[0].output == {"result": 11}
    assert list(llm.requests[1].messages[1].tool_calls) == [ToolCall("c1", "add", {"a": 5, "b": 6})]


async def test_tool_timeout_is_fed_back_and_the_loop_continues() -> None:
    registry = ToolRegistry()

    @registry.tool(timeout_s=0.05)
    async def stuck() -> None:
        await asyncio.sleep(5)

    llm = recording_llm([asks(ToolCall("c1", "stuck", {})), final("gave up")])

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    (record,) = result.tool_call_history
    assert record.error_kind is ErrorKind.TIMEOUT
    assert tool_message_payload(llm.requests[1].messages[-1]) == {
        "error": "tool 'stuck' timed out after 0.05s"
    }
    assert result.content == "gave up"


# -- handlers and concurrency ------------------------------------------------------------------


async def test_sync_and_async_handlers_both_work_in_the_loop() -> None:
    registry = ToolRegistry()
    loop_thread = threading.get_ident()
    threads: dict[str, int] = {}

    @registry.tool
    def sync_tool(n: int) -> int:
        threads["sync"] = threading.get_ident()
        return n + 1

    @registry.tool
    async def async_tool(n: int) -> int:
        threads["async"] = threading.get_ident()
        return n + 2

    llm = recording_llm(
        [asks(ToolCall("s", "sync_tool", {"n": 1}), ToolCall("a", "async_tool", {"n": 1})), final()]
    )

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert [r.output for r in result.tool_call_history] == [{"result": 2}, {"result": 3}]
    assert threads["sync"] != loop_thread
    assert threads["async"] == loop_thread


async def test_parallel_async_calls_run_concurrently() -> None:
    registry = ToolRegistry()
    arrived: list[str] = []
    everyone_here = asyncio.Event()

    @registry.tool(timeout_s=1.0)
    async def meet(who: str) -> str:
        arrived.append(who)
        if len(arrived) == 3:
            everyone_here.set()
        await everyone_here.wait()  # deadlocks (then times out) unless all three run at once
        return who

    calls = [ToolCall(f"c{i}", "meet", {"who": who}) for i, who in enumerate("xyz")]
    llm = recording_llm([asks(*calls), final()])

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert [r.success for r in result.tool_call_history] == [True, True, True]
    assert sorted(arrived) == ["x", "y", "z"]


async def test_parallel_sync_calls_run_concurrently_in_threads() -> None:
    registry = ToolRegistry()
    barrier = threading.Barrier(2, timeout=2)

    @registry.tool
    def meet(who: str) -> str:
        barrier.wait()  # raises BrokenBarrierError unless both run at once
        return who

    llm = recording_llm(
        [asks(ToolCall("c1", "meet", {"who": "a"}), ToolCall("c2", "meet", {"who": "b"})), final()]
    )

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert [(r.success, r.output) for r in result.tool_call_history] == [
        (True, {"result": "a"}),
        (True, {"result": "b"}),
    ]


async def test_records_keep_request_order_when_the_first_requested_finishes_last() -> None:
    registry = ToolRegistry()
    fast_done = asyncio.Event()

    @registry.tool
    async def slow() -> str:
        await fast_done.wait()
        return "slow"

    @registry.tool
    async def fast() -> str:
        fast_done.set()
        return "fast"

    completed: list[str] = []
    llm = recording_llm([asks(ToolCall("c1", "slow", {}), ToolCall("c2", "fast", {})), final()])

    result = await make_runtime(registry, llm).arun_tool_loop(
        "hi",
        on_event=lambda e: (
            completed.append(e.record.call_id) if isinstance(e, ToolCallCompleted) else None
        ),
    )

    assert completed == ["c2", "c1"]
    assert [r.call_id for r in result.tool_call_history] == ["c1", "c2"]
    assert [m.tool_call_id for m in llm.requests[1].messages if m.role is Role.TOOL] == ["c1", "c2"]


async def test_calls_interleave_when_parallel_and_run_one_after_another_when_not() -> None:
    async def markers(parallel: bool) -> list[str]:
        registry = ToolRegistry()
        log: list[str] = []

        @registry.tool
        async def step(name: str) -> None:
            log.append(f"start {name}")
            await asyncio.sleep(0.01)
            log.append(f"end {name}")

        llm = recording_llm(
            [
                asks(ToolCall("1", "step", {"name": "a"}), ToolCall("2", "step", {"name": "b"})),
                final(),
            ]
        )
        await make_runtime(registry, llm, parallel_tool_calls=parallel).arun_tool_loop("hi")
        return log

    assert await markers(parallel=True) == ["start a", "start b", "end a", "end b"]
    assert await markers(parallel=False) == ["start a", "end a", "start b", "end b"]


# -- usage and defaults ------------------------------------------------------------------------


async def test_usage_is_summed_over_the_run(registry: ToolRegistry) -> None:
    llm = recording_llm(
        [
            asks(ToolCall("c1", "echo", {}), usage=Usage(100, 10)),
            asks(ToolCall("c2", "echo", {})),
            final(usage=Usage(150, 25)),
        ]
    )

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert result.usage == Usage(input_tokens=250, output_tokens=35)
    assert result.usage.total_tokens == 285


async def test_usage_is_zero_when_none_is_reported(registry: ToolRegistry) -> None:
    llm = recording_llm([asks(ToolCall("c1", "echo", {})), final()])

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert result.usage == Usage(0, 0)


async def test_run_without_a_context_threads_nothing(registry: ToolRegistry) -> None:
    llm = recording_llm([asks(ToolCall("c1", "echo", {"k": 1})), final()])

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert result.tool_call_history[0].inputs == {"k": 1}
