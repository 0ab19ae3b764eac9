"""The lines of a start-up log that state a decision or a figure, read into values.

Each recogniser reads one message (a :class:`~enginecfg.pipeline.logs.lines.Line`'s, in
vLLM's words, as the releases from 0.6 to 0.34 word it) into a :class:`Logged`: its kind
(:data:`KINDS`), the line it starts on, its own words, the process that wrote it, and its
figures as numbers (``value``, and ``parts`` for a line that states several).  A figure vLLM
rounds keeps the digits it was printed with (``digits``): the exact bytes or requests it
stands for are an interval (:func:`gib_range`), not a number.
"""

from __future__ import annotations

import ast
import re
from types import MappingProxyType
from typing import Any, Callable, Mapping

import attrs

from enginecfg.pipeline.logs.lines import Line

__all__ = ["Logged", "KINDS", "recognise", "gib_range", "read_dict"]

#: what a logged line can state, and its name in the log's own words
KINDS: Mapping[str, str] = MappingProxyType({
    "release": "vLLM version",
    "model": "model",
    "engine_args": "non-default args",
    "engine_config": "Initializing a V1 LLM engine",
    "architecture": "Resolved architecture",
    "max_model_len": "Using max model len",
    "max_num_batched_tokens": "Chunked prefill is enabled with max_num_batched_tokens",
    "kv_cache_dtype": "data type to store kv cache",
    "mamba_cache_mode": "Mamba cache mode is set to",
    "forced_backend": "Gemma4 model has heterogeneous head dimensions",
    "attention_backend": "attention backend",
    "flash_attention_version": "Using FlashAttention version",
    "block_size": "Setting attention block size",
    "mamba_padding": "Padding mamba page size",
    "padding_layers": "Add padding layers",
    "model_loading": "Model loading took",
    "profiling": "Memory profiling",
    "cuda_graph_memory": "Estimated CUDA graph memory",
    "kv_cache_memory_reserved": "reserved memory for KV Cache as specified by kv_cache_memory_bytes",
    "available_kv_cache_memory": "Available KV cache memory",
    "blocks_override": "Overriding num_gpu_blocks",
    "gpu_blocks": "GPU blocks",
    "kv_cache_size": "GPU KV cache size",
    "max_concurrency": "Maximum concurrency",
    "start_error": "start-up error",
    "gpu": "GPU",
})


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class Logged:
    """One logged line that states a decision or a figure.

    ``kind`` is one of :data:`KINDS`; ``line`` the number of the line it starts on (from 1,
    in the text as given); ``text`` its message in vLLM's words; ``process`` and ``rank`` the
    vLLM process that wrote it (None: no process tag); ``value`` its figure or decision (an
    int, a float, a string, or a mapping for the engine arguments); ``digits`` the figure as
    printed, where vLLM rounded it; ``parts`` the other figures of the same line (the
    profiling summary's, the tokens per request of a concurrency line, ...)."""

    kind: str
    line: int
    text: str
    value: Any
    process: str | None = None
    rank: int | None = None
    digits: str | None = None
    parts: Mapping[str, Any] = attrs.field(factory=dict, converter=_read_only)

    @property
    def name(self) -> str:
        """What the line is called, in the log's own words."""
        return KINDS[self.kind]

    def to_dict(self) -> dict[str, Any]:
        value = dict(self.value) if isinstance(self.value, Mapping) else self.value
        out = {"kind": self.kind, "name": self.name, "line": self.line, "text": self.text, "value": value,
               "process": self.process}
        if self.rank is not None:
            out["rank"] = self.rank
        if self.digits is not None:
            out["digits"] = self.digits
        if self.parts:
            out["parts"] = dict(self.parts)
        return out


# --------------------------------------------------------------------------- numbers

def gib_range(digits: str, places: int | None = None) -> tuple[int, int]:
    """The bytes a GiB figure printed as *digits* stands for: every ``b`` with
    ``round(b / 2**30, places) == float(digits)``, both ends included.  vLLM prints memory
    with ``str(round(b / 2**30, 2))`` (``format_gib``), which drops trailing zeros: "48.6"
    stands for 48.595 to 48.605 GiB, so *places* is 2 unless the figure shows more (the
    oldest releases print four: "14.9888")."""
    target = float(digits)
    shown = len(digits.split(".", 1)[1]) if "." in digits else 0
    places = max(2, shown) if places is None else places
    step = 10 ** -places

    def at_least(b: int) -> bool:
        return round(b / 2**30, places) >= target

    def at_most(b: int) -> bool:
        return round(b / 2**30, places) <= target

    lo_bound = int((target - step) * 2**30) - 1
    hi_bound = int((target + step) * 2**30) + 1
    lo, hi = lo_bound, hi_bound
    while lo < hi:  # the first b rounding to at least the target
        mid = (lo + hi) // 2
        if at_least(mid):
            hi = mid
        else:
            lo = mid + 1
    low = lo
    lo, hi = lo_bound, hi_bound
    while lo < hi:  # the last b rounding to at most the target
        mid = (lo + hi + 1) // 2
        if at_most(mid):
            lo = mid
        else:
            hi = mid - 1
    return low, lo


def _int(text: str) -> int:
    return int(text.replace(",", ""))


# --------------------------------------------------------------------------- dicts

def _literal(node: ast.AST, source: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        return {_literal(k, source) if k is not None else None: _literal(v, source)
                for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e, source) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    # a value the log prints as code (KVTransferConfig(...), an enum): kept as its text
    return ast.get_source_segment(source, node)


def read_dict(text: str) -> dict[str, Any] | None:
    """A dict vLLM printed with ``repr`` (the non-default arguments): its literal values read
    as values, anything else (a config object, an enum) kept as its text; None when the text
    is not a whole dict (cut off, or not Python)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None
    if not isinstance(tree.body, ast.Dict):
        return None
    value = _literal(tree.body, text.strip())
    return {str(k): v for k, v in value.items()}


def _engine_config(text: str) -> dict[str, Any]:
    """The ``key=value`` pairs of the engine's config line that are plain values."""
    out: dict[str, Any] = {}
    for m in re.finditer(r"(?:^|, )(?P<k>[a-z_]+)=(?P<v>'[^']*'|[^,(){}\[\]]*)(?=, [a-z_]+=|$)", text):
        raw = m.group("v").strip()
        if raw.startswith("'"):
            out[m.group("k")] = raw.strip("'")
        elif raw in ("True", "False"):
            out[m.group("k")] = raw == "True"
        elif raw == "None":
            out[m.group("k")] = None
        elif re.fullmatch(r"-?\d+", raw):
            out[m.group("k")] = int(raw)
        elif raw:
            out[m.group("k")] = raw
    return out


# --------------------------------------------------------------------------- recognisers

_Recogniser = Callable[[re.Match, Line], list[tuple[str, Any, dict[str, Any]]]]
_RULES: list[tuple[re.Pattern, _Recogniser, bool]] = []


def _rule(pattern: str, *, anywhere: bool = False):
    compiled = re.compile(pattern)

    def register(fn: _Recogniser) -> _Recogniser:
        _RULES.append((compiled, fn, anywhere))
        return fn
    return register


@_rule(r"[\s█▄▀]*[█▄▀][\s█▄▀]*version\s+(?P<v>\d+\.\d+\S*)\s*$")
def _banner_version(m, line):
    return [("release", m.group("v"), {"from": "banner"})]


@_rule(r"[\s█▄▀]*[█▄▀][\s█▄▀]*model\s+(?P<m>\S+)\s*$")
def _banner_model(m, line):
    return [("model", m.group("m"), {"from": "banner"})]


@_rule(r"vLLM API server version (?P<v>\d+\.\d+\S*)")
def _api_version(m, line):
    return [("release", m.group("v"), {"from": "API server"})]


@_rule(r"Initializing an? (?:V\d+ )?LLM engine \(v(?P<v>[^)\s]+)\)(?: with config: (?P<cfg>.*))?")
def _engine(m, line):
    cfg = _engine_config(m.group("cfg")) if m.group("cfg") is not None else {}
    out = [("release", m.group("v"), {"from": "engine"}), ("engine_config", cfg, {})]
    if isinstance(cfg.get("model"), str):
        out.append(("model", cfg["model"], {"from": "engine"}))
    return out


@_rule(r"non-default args: (?P<args>\{.*)$")
def _args(m, line):
    args = read_dict(m.group("args"))
    if args is None:
        return [("engine_args", {}, {"unread": m.group("args")})]
    out = [("engine_args", args, {})]
    model = args.get("model") or args.get("model_tag")
    if isinstance(model, str):
        out.append(("model", model, {"from": "non-default args"}))
    return out


@_rule(r"Resolved architecture: (?P<a>\w+)")
def _architecture(m, line):
    return [("architecture", m.group("a"), {})]


@_rule(r"Using max model len (?P<n>\d+)")
def _max_len(m, line):
    return [("max_model_len", int(m.group("n")), {})]


@_rule(r"Chunked prefill is enabled with max_num_batched_tokens=(?P<n>\d+)")
def _chunked(m, line):
    return [("max_num_batched_tokens", int(m.group("n")), {})]


@_rule(r"Using (?P<d>[a-z0-9_]+) data type to store kv cache")
def _kv_dtype(m, line):
    return [("kv_cache_dtype", m.group("d"), {})]


@_rule(r"Mamba cache mode is set to '(?P<m>\w+)'")
def _mamba_mode(m, line):
    return [("mamba_cache_mode", m.group("m"), {})]


@_rule(r"Gemma4 model has heterogeneous head dimensions \(head_dim=(?P<h>\d+), global_head_dim=(?P<g>\d+)\)"
       r".*?[Ff]orcing (?P<b>[A-Z][A-Z0-9_]+) backend")
def _forced(m, line):
    return [("forced_backend", m.group("b"), {"head_dim": int(m.group("h")), "global_head_dim": int(m.group("g"))})]


#: the attention backend of the decoder's layers (not the vision encoder's, logged beside it)
@_rule(r"Using (?:AttentionBackendEnum\.)?(?P<b>[A-Z][A-Z0-9_]+) attention backend"
       r"(?: out of potential backends: \[(?P<c>[^\]]*)\])?")
def _backend(m, line):
    candidates = [c.strip().strip("'\"") for c in (m.group("c") or "").split(",") if c.strip()]
    return [("attention_backend", m.group("b"), {"candidates": candidates} if candidates else {})]


@_rule(r"Using (?:backend )?AttentionBackendEnum\.(?P<b>[A-Z][A-Z0-9_]+)(?: backend)?\.?\s*$")
def _backend_enum(m, line):
    return [("attention_backend", m.group("b"), {})]


_OLD_NAMES = {"Flash Attention": "FLASH_ATTN", "FlashInfer": "FLASHINFER", "Triton": "TRITON_ATTN",
              "FlexAttention": "FLEX_ATTENTION", "XFormers": "XFORMERS"}


@_rule(r"Using (?P<b>Flash Attention|FlashInfer|Triton|FlexAttention|XFormers) backend(?: on V1 engine)?\.")
def _backend_old(m, line):
    return [("attention_backend", _OLD_NAMES[m.group("b")], {"spelled": m.group("b")})]


@_rule(r"Using FlashAttention version (?P<n>\d+)")
def _fa(m, line):
    return [("flash_attention_version", int(m.group("n")), {})]


@_rule(r"(?:\[XPU\])?Setting attention block size to (?P<n>\d+) tokens")
def _block(m, line):
    return [("block_size", int(m.group("n")), {})]


@_rule(r"Padding mamba page size by (?P<p>\d+(?:\.\d+)?)%")
def _padding(m, line):
    return [("mamba_padding", float(m.group("p")), {"digits": m.group("p")})]


@_rule(r"Add (?P<n>\d+) padding layers, may waste at most (?P<p>\d+(?:\.\d+)?)% KV cache memory")
def _padding_layers(m, line):
    return [("padding_layers", int(m.group("n")), {"percent": float(m.group("p"))})]


@_rule(r"Model loading took (?P<g>\d+(?:\.\d+)?) GiB(?: memory)?(?: and (?P<s>\d+(?:\.\d+)?) s(?:econds)?)?")
def _loading(m, line):
    parts = {"digits": m.group("g")}
    if m.group("s"):
        parts["seconds"] = float(m.group("s"))
    return [("model_loading", float(m.group("g")), parts)]


@_rule(r"Loading model weights took (?P<g>\d+(?:\.\d+)?) GB")
def _loading_v0(m, line):
    return [("model_loading", float(m.group("g")), {"digits": m.group("g")})]


@_rule(r"Memory profiling takes (?P<s>[\d.]+) seconds\. Total non KV cache memory: (?P<total>-?[\d.]+) ?GiB; "
       r"torch peak memory increase: (?P<peak>-?[\d.]+) ?GiB; (?:non-torch forward increase memory: "
       r"(?P<nontorch>-?[\d.]+)|total consumed \(from mem_get_info\): (?P<consumed>-?[\d.]+)) ?GiB; "
       r"weights memory: (?P<weights>-?[\d.]+) ?GiB")
def _profiling(m, line):
    # the third part: the non-torch increase, or from vLLM 0.27.0 on (K9b) the free memory's drop
    # over the profiling (total consumed)
    third = {"non_torch_increase": m.group("nontorch")} if m.group("nontorch") is not None \
        else {"total_consumed": m.group("consumed")}
    parts = {"non_kv_cache_memory": m.group("total"), "torch_peak_increase": m.group("peak"), **third,
             "weights_memory": m.group("weights")}
    return [("profiling", float(m.group("total")), {**parts, "seconds": float(m.group("s"))})]


@_rule(r"model weights take (?P<weights>[\d.]+)GiB; non_torch_memory takes (?P<nontorch>-?[\d.]+)GiB; "
       r"PyTorch activation peak memory takes (?P<peak>[\d.]+)GiB; the rest of the memory reserved for KV Cache "
       r"is (?P<kv>-?[\d.]+)GiB", anywhere=True)
def _profiling_09(m, line):
    parts = {"weights_memory": m.group("weights"), "non_torch_increase": m.group("nontorch"),
             "torch_peak_increase": m.group("peak"), "kv_cache_memory": m.group("kv")}
    return [("profiling", float(m.group("kv")), parts)]


@_rule(r"Memory profiling results: (?P<pairs>.*)")
def _profiling_v0(m, line):
    parts = {k: v for k, v in re.findall(r"(\w+)=([-\d.]+)(?:GiB)?", m.group("pairs"))}
    out = [("profiling", float(parts["kv_cache_size"]) if "kv_cache_size" in parts else None, parts)]
    if "total_gpu_memory" in parts:
        out.append(("gpu", None, {"total_gib": parts["total_gpu_memory"]}))
    return out


@_rule(r"Estimated CUDA graph memory: (?P<g>-?\d+(?:\.\d+)?) GiB total")
def _cuda_graphs(m, line):
    return [("cuda_graph_memory", float(m.group("g")), {"digits": m.group("g")})]


@_rule(r"Initial free memory (?P<free>[\d.]+) GiB, reserved (?P<g>[\d.]+) GiB memory for KV Cache as "
       r"specified by kv_cache_memory_bytes")
def _reserved(m, line):
    return [("kv_cache_memory_reserved", float(m.group("g")), {"digits": m.group("g"), "free_gib": m.group("free")})]


@_rule(r"Available KV cache memory: (?P<g>-?\d+(?:\.\d+)?) GiB")
def _available(m, line):
    return [("available_kv_cache_memory", float(m.group("g")), {"digits": m.group("g")})]


@_rule(r"Overriding num_gpu_blocks=(?P<a>-?\d+) with num_gpu_blocks_override=(?P<b>\d+)")
def _override(m, line):
    return [("blocks_override", int(m.group("b")), {"blocks": int(m.group("a"))})]


@_rule(r"#?\s*GPU blocks: (?P<n>\d+)(?:, # CPU blocks: (?P<cpu>\d+))?")
def _gpu_blocks(m, line):
    return [("gpu_blocks", int(m.group("n")), {})]


#: the metrics logger's copy of the block count (0.10 and 0.11: "Engine 000: vllm cache_config_info
#: with initialization after num_gpu_blocks is: 43925")
@_rule(r"cache_config_info with initialization after num_gpu_blocks is: (?P<n>\d+)", anywhere=True)
def _gpu_blocks_metrics(m, line):
    return [("gpu_blocks", int(m.group("n")), {"from": "metrics logger"})]


@_rule(r"(?P<pool>[A-Z]+)(?: \+ host)? KV cache size: (?P<n>[\d,]+) tokens"
       r"(?:, Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<c>\d+(?:\.\d+)?)x)?")
def _kv_size(m, line):
    out = [("kv_cache_size", _int(m.group("n")), {"pool": m.group("pool")})]
    if m.group("c"):
        out.append(("max_concurrency", float(m.group("c")), {"max_model_len": _int(m.group("len")),
                                                             "digits": m.group("c")}))
    return out


@_rule(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<c>\d+(?:\.\d+)?)x")
def _concurrency(m, line):
    return [("max_concurrency", float(m.group("c")), {"max_model_len": _int(m.group("len")), "digits": m.group("c")})]


#: the refusals of the engine start (vLLM's messages from 0.6 to 0.34)
_START_ERRORS = (r"To serve at least one request", r"No available memory for the cache blocks",
                 r"Free memory on device", r"Cannot auto-fit max_model_len", r"The model's max seq len",
                 r"CUDA out of memory", r"Insufficient memory")


@_rule(r"(?:(?P<t>[A-Za-z_.]*(?:Error|Exception)): )?(?P<m>(?:" + "|".join(_START_ERRORS) + r").*)")
def _start_error(m, line):
    return [("start_error", m.group("m"), {"type": m.group("t") or None})]


@_rule(r"device_name=(?P<d>[A-Za-z0-9_-]+)(?:,[^.]*)?\.json", anywhere=True)
def _gpu_name(m, line):
    return [("gpu", m.group("d").replace("_", " "), {"from": "a kernel tuning file"})]


@_rule(r"Free memory on device \S+ \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\)", anywhere=True)
def _gpu_memory(m, line):
    return [("gpu", None, {"total_gib": m.group("total"), "free_gib": m.group("free")})]


#: messages about the vision encoder's attention, which are not the decoder's backend
_NOT_DECODER = re.compile(r"for vit attention|for MMEncoderAttention|vit attention backend", re.IGNORECASE)


def recognise(line: Line) -> list[Logged]:
    """What *line* states, as :class:`Logged` values (none for a line that states nothing
    this reader knows)."""
    message = line.message.strip()
    if not message or _NOT_DECODER.search(message):
        return []
    out: list[Logged] = []
    for pattern, fn, anywhere in _RULES:
        m = pattern.search(message) if anywhere else pattern.match(message)
        if m is None:
            continue
        for kind, value, parts in fn(m, line):
            digits = parts.pop("digits", None) if isinstance(parts, dict) else None
            out.append(Logged(kind, line.number, message, value, line.process, line.rank, digits, parts))
    return out
