import os
import pathlib

import openai

key = pathlib.Path(os.environ["KEY_FILE"]).read_text().split()[0]
client = openai.OpenAI(base_url=os.environ["BASE_URL"], api_key=key, timeout=600)
out = client.completions.create(
    model=os.environ["MODEL"], prompt="The capital of France is", max_tokens=8, temperature=0
)
text = out.choices[0].text
print(f"model={out.model} completion_tokens={out.usage.completion_tokens} text={text!r}")
assert out.model == os.environ["MODEL"] and out.usage.completion_tokens > 0 and text.strip(), (
    "empty answer"
)
