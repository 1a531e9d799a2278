"""specviz demo (Gradio): generate with a drafter, read the summary, download the trace.

    python app.py            # or `make demo`; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT are honoured

The page is built without loading a model; the model loads on the first Generate
(`specviz.load_model` caches it, so later runs reuse it). This is the minimal front end;
the step-by-step explorer comes later.
"""
from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # runs offline; no usage pings

import gradio as gr  # noqa: E402

from specviz import DRAFTERS, DecodingConfig, build_prompt, generate, load_model  # noqa: E402
from specviz.errors import SpecvizError  # noqa: E402
from specviz.settings import build  # noqa: E402

EXAMPLE_CONTEXT = (
    "Speculative decoding speeds up a language model without changing its output. A cheap "
    "drafter guesses several next tokens; the large model checks all of them in a single "
    "forward pass and keeps the longest prefix it agrees with, plus one token of its own. "
    "When the guesses are good, one forward pass yields several tokens. When they are bad, "
    "the step still yields one token, so the output is the same as plain decoding. Drafters "
    "that copy from the prompt work well when the answer repeats the prompt, as in "
    "summarisation, question answering over documents and code editing."
)
EXAMPLE_MESSAGE = "Summarise the text above in two sentences."

TRACE_DIR = Path(tempfile.gettempdir()) / "specviz-traces"


def summary_markdown(trace) -> str:
    t = trace.totals
    lines = [
        f"**{t.new_tokens} tokens** in **{t.steps} steps** - {t.tokens_per_s:.1f} tokens/s - "
        f"mean accepted tokens per step **{t.mean_accepted:.2f}** (1.00 = plain decoding) - "
        f"stop: {trace.stop_reason}",
        f"model `{trace.model_id}` on {trace.device} ({trace.dtype}), drafter `{trace.drafter}`",
    ]
    lines += [f"warning: {e}" for e in trace.errors]
    return "\n\n".join(lines)


def run_generation(model_id: str, drafter: str, context: str, message: str,
                   max_new_tokens: float, temperature: float) -> tuple[str, str, str]:
    """The Generate handler: (output text, summary markdown, path of the trace JSON).

    User mistakes (SpecvizError) become a gr.Error with the engine's message.
    """
    try:
        decoding = build(DecodingConfig, {"max_new_tokens": max_new_tokens, "temperature": temperature})
        lm = load_model(model_id or "embedded")
        prompt = build_prompt(lm.tokenizer, message, context=context)
        config = None
        if drafter == "oracle":  # the oracle replays a known continuation: vanilla's, here
            config = {"tokens": generate(lm, prompt, "vanilla", None, decoding).output_ids}
        trace = generate(lm, prompt, drafter, config, decoding)
    except SpecvizError as err:
        raise gr.Error(str(err), print_exception=False) from None
    TRACE_DIR.mkdir(parents=True, exist_ok=True)
    path = TRACE_DIR / f"trace-{trace.drafter}-{uuid.uuid4().hex[:8]}.json"
    path.write_text(trace.to_json(), encoding="utf-8")
    return trace.output_text, summary_markdown(trace), str(path)


def build_demo() -> gr.Blocks:
    drafters = sorted(DRAFTERS)
    with gr.Blocks(title="specviz") as demo:
        gr.Markdown("# specviz\nSee, teach and debug speculative decoding. The model loads on the "
                    "first Generate (the embedded SmolLM2-135M-Instruct runs offline on a CPU).")
        with gr.Row():
            model = gr.Textbox(value="embedded", label="Model",
                               info="'embedded', 'tiny-random' (random weights, for trying the UI), "
                                    "a local path or a hub id")
            drafter = gr.Dropdown(choices=drafters, value="ngram_trie" if "ngram_trie" in drafters
                                  else drafters[0], label="Drafter",
                                  info=" · ".join(f"{n}: {DRAFTERS[n].summary.rstrip('.')}" for n in drafters))
        context = gr.Textbox(label="Context (optional)", lines=8,
                             placeholder="A document to summarise, passages to answer from...")
        message = gr.Textbox(label="Message", lines=2, placeholder="Summarise the text above.")
        with gr.Row():
            max_new = gr.Slider(1, 1024, value=128, step=1, label="Max new tokens")
            temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature",
                                    info="0 = greedy")
        button = gr.Button("Generate", variant="primary")
        output = gr.Textbox(label="Output", lines=8, interactive=False)
        summary = gr.Markdown(label="Summary")
        trace_file = gr.File(label="Trace (JSON)", interactive=False)
        gr.Examples([[EXAMPLE_CONTEXT, EXAMPLE_MESSAGE]], inputs=[context, message],
                    cache_examples=False)
        button.click(run_generation, inputs=[model, drafter, context, message, max_new, temperature],
                     outputs=[output, summary, trace_file])
    return demo


demo = build_demo()

if __name__ == "__main__":
    demo.launch()  # GRADIO_SERVER_NAME / GRADIO_SERVER_PORT come from the environment
