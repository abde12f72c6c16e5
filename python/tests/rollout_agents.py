"""The agents the rollout and trainer-adapter tests drive through the gateway: a plain chat agent, and the
OpenAI Agents SDK's tool agent with the rule that scores it."""
import openai

BIAS = {"logit_bias": {"456": 6, "460": 14}}  # nudges the tiny model towards a parsable tool call


def chat_agent(ctx):
    """A plain (sync) agent: one greedy chat call with the openai client."""
    client = openai.OpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key, max_retries=3, timeout=60)
    client.chat.completions.create(model="tiny", max_tokens=6, temperature=0,
                                   messages=[{"role": "user", "content": ctx.task["prompt"]}])
    return 0.25


def tool_agent(answers):
    """The OpenAI Agents SDK: a calculator agent that must call its tool, a model of its own per session
    (the SDK's default client is global); what it answered is kept per session for the test's check."""
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def calc(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    async def run(ctx):
        # llama-server answers 500 for about one tool call in five of the random model (its parser cannot
        # read it); nothing is recorded for such a call, and the client retries it, as for any 500.
        async with openai.AsyncOpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key, max_retries=6, timeout=60) as client:
            return await run_with(ctx, client)

    async def run_with(ctx, client):
        agent = Agent(
            name="calculator", instructions="Use calc.", tools=[calc],
            model=OpenAIChatCompletionsModel(model="tiny", openai_client=client),
            tool_use_behavior="stop_on_first_tool",
            model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False, max_tokens=24, extra_body=BIAS),
        )
        result = await Runner.run(agent, ctx.task["prompt"], max_turns=3)
        answers[ctx.session_id] = str(result.final_output)
        return answers[ctx.session_id]

    return run


def rule(task, answer):
    """The environment's check: did the agent's answer equal a + b?"""
    return 1.0 if answer.strip() == str(task["a"] + task["b"]) else 0.0
