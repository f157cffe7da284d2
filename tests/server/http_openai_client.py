"""Talks to `specpipe serve --http` with the `openai` package from PyPI (a client no one
here wrote): completions and chat, whole and streamed, models, and an error.
Usage: http_openai_client.py BASE_URL MODEL"""
import sys

import openai

base_url, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)

assert [m.id for m in client.models.list()] == [model]

whole = client.completions.create(model=model, prompt="def fib(n):", max_tokens=24, temperature=0,
                                  extra_body={"ignore_eos": True})
text = whole.choices[0].text
assert whole.choices[0].finish_reason == "length", whole
assert whole.usage.completion_tokens == 24, whole.usage
assert whole.model_extra["specpipe"]["stats"]["rounds"] > 0  # the extension field
streamed = "".join(c.choices[0].text for c in client.completions.create(
    model=model, prompt="def fib(n):", max_tokens=24, temperature=0, stream=True, extra_body={"ignore_eos": True}))
assert streamed == text, (streamed, text)
print(f"completions: {text!r}")

messages = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "def add(a, b):"}]
chat = client.chat.completions.create(model=model, messages=messages, max_tokens=16, seed=3, temperature=0.8)
reply = chat.choices[0].message.content
assert chat.choices[0].message.role == "assistant" and reply, chat
chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=16, seed=3, temperature=0.8,
                                             stream=True, stream_options={"include_usage": True}))
assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reply
assert chunks[-1].usage.completion_tokens == chat.usage.completion_tokens
print(f"chat: {reply!r}")

try:
    client.completions.create(model=model, prompt="x", n=2)
    raise AssertionError("n=2 was accepted")
except openai.BadRequestError as e:
    assert e.body["code"] == "bad_request", e.body
try:
    client.completions.create(model="no-such-model", prompt="x")
    raise AssertionError("an unknown model was accepted")
except openai.NotFoundError:
    pass
print("openai client: ok")
