"""Chat templates that declare tools, written for the tests (no model hub here): the lab's own
tokenizers have none (SmolLM2's template ignores `tools`; the tiny models have no template).
Two styles the field uses, so the paper's renderer is shown to work on more than one:

  CHATML_TOOLS  ChatML turns; the tools declared as JSON in the system turn; a call as
                <tool_call>{json}</tool_call>; a tool response as a user turn in
                <tool_response> (the Qwen / Hermes convention)
  JSON_TOOLS    a `tool` role whose content is JSON-escaped (`| tojson`), the tools declared in
                the first user turn (the Llama 3.1 JSON convention): the text of a chunk is
                rendered escaped, so it can't be found by searching for it
"""

CHATML_TOOLS = (
    "{%- if messages[0].role == 'system' %}{%- set system = messages[0].content %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = '' %}{%- set rest = messages %}"
    "{%- endif %}"
    "{{- '<|im_start|>system\\n' + system }}"
    "{%- if tools %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call these functions:\\n<tools>\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n' }}{%- endfor %}"
    "{{- '</tools>\\nCall one as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>.' }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- for m in rest %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}"
    "{{- '<|im_start|>assistant\\n' }}{%- if m.content %}{{- m.content + '\\n' }}{%- endif %}"
    "{%- for call in m.tool_calls %}"
    "{%- set f = call.function if call.function is defined else call %}"
    "{{- '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}"
    "{{- f.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content }}"
    "{{- '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

JSON_TOOLS = (
    "{%- set ns = namespace(declared=false) %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' and tools and not ns.declared %}"
    "{%- set ns.declared = true %}"
    "{{- '<|im_start|>user\\nFunctions you may call, as JSON:\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n\\n' }}{%- endfor %}"
    "{{- m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}"
    "{%- for call in m.tool_calls %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{{- {'name': call.function.name, 'parameters': call.function.arguments} | tojson }}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_start|>tool\\n{\"output\": ' + (m.content | tojson) + '}<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
