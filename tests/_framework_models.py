"""Models for the framework adapter tests (tests/integrations): DyTopo replies as JSON, a LangChain runnable
that records what each agent was sent, and the session's shared vLLM engine as a LangChain chat model and as an
AutoGen model client (the real-model tests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import Runnable, RunnableLambda

from toporoute.integrations.rounds import worker_spec
from toporoute.llm.types import Message, Request, Sampling


def reply(public: str, need: str, offer: str, private: dict[str, str] | None = None) -> str:
    """A worker's reply in DyTopo's JSON."""
    return json.dumps(
        {"public_content": public, "private_content": private or {}, "q_vector": need, "k_vector": offer}
    )


def decision(complete: bool, next_goal: str = "Fix what the tester found.") -> str:
    """A manager's reply in DyTopo's JSON."""
    return json.dumps(
        {
            "public_content": "status",
            "private_content": {},
            "q_vector": "I need everyone's status.",
            "k_vector": "I provide coordination.",
            "is_complete": complete,
            "next_goal": next_goal,
        }
    )


def recording(replies: Sequence[str], seen: list[Any]) -> Runnable:
    """A runnable agent: appends each input (the messages) to ``seen``, then answers the next of ``replies``
    (a LangChain fake chat model)."""

    def keep(messages: Any) -> Any:
        seen.append(messages)
        return messages

    return RunnableLambda(keep) | FakeListChatModel(responses=list(replies))


# ---------------------------------------------------------------------------------------------- real models


def _engine_call(shared: Any, messages: Sequence[tuple[str, str]], max_tokens: int, schema: Any) -> Any:
    request = Request(
        messages=tuple(Message(r, c) for r, c in messages),
        sampling=Sampling(max_tokens=max_tokens, temperature=0.0, seed=0),
        schema=schema,
    )
    return asyncio.run_coroutine_threadsafe(shared.engine.generate([request]), shared.loop)


def engine_chat_model(shared: Any, *, max_tokens: int, schema: dict[str, Any] | None = None) -> Any:
    """The shared vLLM engine (tests/_shared_vllm.py ``SharedVLLM``) as a LangChain chat model; ``schema`` is
    sent for guided decoding."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    roles = {"system": "system", "human": "user", "ai": "assistant"}

    class EngineChat(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "toporoute-shared-vllm"

        def _result(self, result: Any) -> ChatResult:
            usage = {
                "input_tokens": result.usage.prompt_tokens,
                "output_tokens": result.usage.completion_tokens,
                "total_tokens": result.usage.total_tokens,
            }
            return ChatResult(
                generations=[ChatGeneration(message=AIMessage(result.text, usage_metadata=usage))]
            )

        def _calls(self, messages: list[BaseMessage]) -> list[tuple[str, str]]:
            return [(roles[m.type], str(m.content)) for m in messages]

        def _generate(self, messages: list[BaseMessage], stop: Any = None, **kwargs: Any) -> ChatResult:
            future = _engine_call(shared, self._calls(messages), max_tokens, schema)
            return self._result(future.result(600)[0])

        async def _agenerate(
            self, messages: list[BaseMessage], stop: Any = None, **kwargs: Any
        ) -> ChatResult:
            future = _engine_call(shared, self._calls(messages), max_tokens, schema)
            return self._result((await asyncio.wrap_future(future))[0])

    return EngineChat()


def engine_model_client(shared: Any, *, max_tokens: int, schema: dict[str, Any] | None = None) -> Any:
    """The shared vLLM engine as an AutoGen ``ChatCompletionClient`` (the replay client's bookkeeping, with
    ``create`` answered by the engine); ``schema`` is sent for guided decoding."""
    from autogen_core.models import CreateResult, RequestUsage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    class EngineClient(ReplayChatCompletionClient):
        async def create(self, messages: Sequence[Any], **kwargs: Any) -> CreateResult:
            calls = []
            for m in messages:
                kind = type(m).__name__
                role = {"SystemMessage": "system", "AssistantMessage": "assistant"}.get(kind, "user")
                text = m.content if isinstance(m.content, str) else json.dumps(m.content, default=str)
                if kind == "UserMessage" and getattr(m, "source", None):
                    text = f"{m.source}: {text}"
                calls.append((role, text))
            result = (await asyncio.wrap_future(_engine_call(shared, calls, max_tokens, schema)))[0]
            usage = RequestUsage(result.usage.prompt_tokens, result.usage.completion_tokens)
            self._cur_usage = usage
            self._update_total_usage()
            return CreateResult(finish_reason="stop", content=result.text, usage=usage, cached=False)

    return EngineClient(chat_completions=[])


def engine_workers(
    make: Callable[..., Any], shared: Any, names: Sequence[str], *, max_tokens: int
) -> dict[str, Any]:
    """Each of ``names`` as a DyTopo worker on the shared engine: ``make`` (:func:`engine_chat_model` or
    :func:`engine_model_client`) with the worker's reply schema sent for guided decoding."""
    return {
        n: make(shared, max_tokens=max_tokens, schema=worker_spec(n, max_tokens=max_tokens).schema)
        for n in names
    }
