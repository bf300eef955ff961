# SPDX-License-Identifier: Apache-2.0
"""qkvfuse.integrations.transformers on transformers' own model classes:
for each family, a 2-layer model with GQA and the family's head dim and
rope settings, built from a config in code (no downloads) with random
weights, run patched and unpatched:

- every attention layer is patched, and the patched forward calls the
  qkvfuse operator once per layer (counted, so a silent fallback fails);
- logits of a 64-token prefill and of 16 greedy decode steps (through
  transformers' cache) differ between patched and unpatched by no more
  than the unpatched model's own float32-vs-bf16 spread on the same input;
- the greedy tokens are identical (in bf16 the paths may part only at a
  near tie: top two logits within twice the spread), and so is
  generate()'s output in float32;
- unpatch restores the original functions exactly (bit-identical logits);
- a patched model runs under torch.compile with the operator in its graph, in one graph
  (and under aot_eager, whose tracing runs the operators' fake kernels).
- a config the operator cannot take (head_dim below 16, a q/k norm eps
  that is not a positive float32 or differs between q and k) leaves the
  layers unpatched with a warning naming it, the model running as before.
- rope types whose table depends on the positions (dynamic, longrope,
  across their switch), yarn's optional fields, Gemma-3's per-layer-type
  tables, partial rotary dims down to 0 and caller-given position ids
  match an unpatched copy in float32.
- a forward in another thread while a patched layer runs is not taken for
  that layer's.

float32 and bfloat16; CPU, and CUDA where present. Skipped without
transformers."""
import re
import threading
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from conftest import cuda_ok  # noqa: E402
from qkvfuse import _binding  # noqa: E402
from qkvfuse.integrations import transformers as qt  # noqa: E402

COMMON = dict(vocab_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=512, intermediate_size=256, pad_token_id=0)


def _configs():
    """family -> (config class, model class, config arguments): each family's head dim and rope settings."""
    t = transformers
    out = {
        "llama": ("LlamaConfig", "LlamaForCausalLM",
                  dict(hidden_size=192, head_dim=128, rope_theta=500000.0,
                       rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                         high_freq_factor=4.0, original_max_position_embeddings=128))),
        "mistral": ("MistralConfig", "MistralForCausalLM", dict(hidden_size=192, head_dim=128, rope_theta=1e6)),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(hidden_size=256, rope_theta=1e6)),  # qkv bias, D 64
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(hidden_size=192, head_dim=128, rope_theta=1e6)),
        "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
                   dict(hidden_size=192, head_dim=256, query_pre_attn_scalar=256, sliding_window=32)),
        "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
                   dict(hidden_size=192, head_dim=256, query_pre_attn_scalar=256, sliding_window=32,
                        layer_types=["sliding_attention", "full_attention"])),
        "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(hidden_size=384, partial_rotary_factor=0.5)),  # D 96, R 48
        "glm4": ("Glm4Config", "Glm4ForCausalLM", dict(hidden_size=192, head_dim=128, partial_rotary_factor=0.5)),
    }
    return {k: v for k, v in out.items() if hasattr(t, v[0]) and hasattr(t, v[1])}


CONFIGS = _configs()
DEVICES = ["cpu"] + (["cuda"] if cuda_ok() else [])


def _model(family, dtype, device):
    cfg_name, model_name, kw = CONFIGS[family]
    cfg = getattr(transformers, cfg_name)(**COMMON, **kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(1234)
    m = getattr(transformers, model_name)(cfg).eval()
    with torch.no_grad():  # norm weights away from their initial ones, so that a lost norm shows
        for mod in m.modules():
            for n in ("q_norm", "k_norm"):
                norm = getattr(mod, n, None)
                if norm is not None:
                    norm.weight.uniform_(-0.5, 0.5) if type(mod).__name__.startswith("Gemma") \
                        else norm.weight.uniform_(0.5, 1.5)
    return m.to(device=device, dtype=dtype)


class _Counting:
    """Stands in for _binding.OPS, counting calls of the run operator."""

    def __init__(self, ops):
        self._ops, self.calls = ops, 0

    def __getattr__(self, name):
        return getattr(self._ops, name)

    def run(self, *a):
        self.calls += 1
        return self._ops.run(*a)


def _greedy(m, ids, steps):
    """Logits of the prefill and of each greedy step (through the model's cache), and the tokens."""
    out = m(ids, use_cache=True)
    logits, cache, toks = [out.logits[:, -1]], out.past_key_values, []
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(steps):
        toks.append(nxt)
        out = m(nxt, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits.append(out.logits[:, -1])
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    return out, torch.stack(logits).float(), torch.cat(toks, 1), m(ids).logits.float()


def _same_greedy_path(tok1, tok0, dec0, spread, family):
    """The patched greedy tokens equal the unpatched ones, except that the
    paths may part at a step whose unpatched top two logits are within
    twice the float32-vs-bf16 spread (a tie at bf16's precision)."""
    for row in range(tok0.shape[0]):
        differ = (tok1[row] != tok0[row]).nonzero()
        if len(differ):
            i = int(differ[0])
            top = dec0[i, row].topk(2).values
            assert (top[0] - top[1]).item() <= 2 * spread, (family, row, i, (top[0] - top[1]).item(), spread)


@pytest.fixture
def counting(monkeypatch):
    """The operators, counting the run operator's calls."""
    c = _Counting(_binding.OPS)
    monkeypatch.setattr(_binding, "OPS", c)
    return c


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_family_patched_matches_unpatched(family, device, counting):
    ids = torch.randint(0, COMMON["vocab_size"], (2, 64), generator=torch.Generator().manual_seed(7)).to(device)
    with torch.no_grad():
        m32 = _model(family, torch.float32, device)
        _, dec32, tok32, pre32 = _greedy(m32, ids, 16)
        for dtype in (torch.float32, torch.bfloat16):
            m = m32 if dtype == torch.float32 else _model(family, dtype, device)
            _, dec0, tok0, pre0 = _greedy(m, ids, 16)
            spread = max((pre0 - pre32).abs().max().item(), (dec0 - dec32).abs().max().item())
            names = qt.patch(m)
            n_attn = sum(1 for x in m.modules() if type(x).__name__ in qt.FAMILIES)
            assert len(names) == n_attn == COMMON["num_hidden_layers"], names
            counting.calls = 0
            _, dec1, tok1, pre1 = _greedy(m, ids, 16)
            # prefill + 16 steps + the full-sequence forward: one call per layer each
            assert counting.calls == 18 * n_attn, counting.calls
            gen1 = m.generate(ids[:1, :16], max_new_tokens=12, do_sample=False)
            diff = max((pre1 - pre0).abs().max().item(), (dec1 - dec0).abs().max().item())
            err1 = max((pre1 - pre32).abs().max().item(), (dec1 - dec32).abs().max().item())
            if dtype == torch.float32:
                assert diff <= 1e-4 * max(1.0, pre0.abs().max().item()), (family, diff)
                assert torch.equal(tok1, tok0), family
            else:
                # as close to the float32 model as the unpatched bf16 model is (to a quarter of it),
                # so within twice its spread of the unpatched bf16 logits
                assert err1 <= 1.25 * spread and diff <= 2 * spread, (family, diff, err1, spread)
                _same_greedy_path(tok1, tok0, dec0, spread, family)
            assert qt.unpatch(m) == names and qt.patched_layers(m) == []
            gen0 = m.generate(ids[:1, :16], max_new_tokens=12, do_sample=False)
            assert gen1.shape == gen0.shape and torch.equal(gen1[:, :16], ids[:1, :16])
            if dtype == torch.float32:
                assert torch.equal(gen1, gen0), family
            _, dec2, _, pre2 = _greedy(m, ids, 16)
            assert torch.equal(pre2, pre0) and torch.equal(dec2, dec0)


def test_patch_is_idempotent_and_leaves_other_models_alone(counting):
    family = sorted(CONFIGS)[0]
    a, b = _model(family, torch.float32, "cpu"), _model(family, torch.float32, "cpu")
    ids = torch.randint(0, COMMON["vocab_size"], (1, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = b(ids).logits
        assert qt.patch(a) == qt.patch(a)
        counting.calls = 0
        assert torch.equal(b(ids).logits, ref)  # b is not patched: the original code, no qkvfuse call
        assert counting.calls == 0
        a(ids)
        assert counting.calls == COMMON["num_hidden_layers"]
        qt.unpatch(a)


def test_unservable_layer_is_left_with_a_warning():
    family = "qwen3" if "qwen3" in CONFIGS else sorted(CONFIGS)[0]
    m = _model(family, torch.float32, "cpu")
    layer = m.model.layers[0].self_attn
    layer.head_dim = 2048  # above the operator's limit
    with pytest.warns(UserWarning, match=r"layers\.0\.self_attn .*left unpatched: head_dim 2048"):
        names = qt.patch(m)
    assert names == ["model.layers.1.self_attn"]
    qt.unpatch(m)


def test_autograd_runs_the_original_code(counting):
    family = "qwen3" if "qwen3" in CONFIGS else sorted(CONFIGS)[0]
    m = _model(family, torch.float32, "cpu")
    ids = torch.randint(0, COMMON["vocab_size"], (1, 8), generator=torch.Generator().manual_seed(5))
    ref = m(ids).logits
    qt.patch(m)
    counting.calls = 0
    try:
        out = m(ids).logits
        out.sum().backward()  # the graph exists: the prologue ran transformers' own ops
        assert counting.calls == 0
        assert torch.allclose(out, ref, atol=1e-6)
    finally:
        qt.unpatch(m)


@pytest.mark.parametrize("fuse", [False, True])
def test_patched_model_compiles(fuse):
    family = "qwen3" if "qwen3" in CONFIGS else sorted(CONFIGS)[0]
    m = _model(family, torch.float32, "cpu")
    ids = torch.randint(0, COMMON["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        ref = m(ids).logits
        qt.patch(m, fuse_projections=fuse)
        try:
            torch._dynamo.reset()
            seen = []

            def backend(gm, example_inputs):  # the traced graphs hold the qkvfuse operator
                seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "qkvfuse" in str(n.target))
                return gm.forward
            counters = torch._dynamo.utils.counters
            counters.clear()
            out = torch.compile(m, backend=backend)(ids).logits
            assert len(seen) == COMMON["num_hidden_layers"], seen
            assert not counters["graph_break"], dict(counters["graph_break"])  # one graph, as unpatched
            torch._dynamo.reset()
            compiled = torch.compile(m, backend="aot_eager")
            out2 = compiled(ids).logits
            graphs = []

            def in_thread():  # a thread that patches: compiled, eager, compiled again, no new graph
                with torch.no_grad():
                    n = counters["stats"]["unique_graphs"]
                    qt.patch(m, fuse_projections=fuse)
                    compiled(ids), m(ids), compiled(ids)
                    graphs.append(counters["stats"]["unique_graphs"] - n)
            worker = threading.Thread(target=in_thread)
            worker.start()
            worker.join()
            assert graphs == [0], graphs
            if fuse:  # the compiled model sees its parameters change as the eager one does
                m.to(torch.bfloat16)
                assert torch.equal(compiled(ids).logits, m(ids).logits)
                layer = next(x for x in m.modules() if type(x).__name__ in qt.FAMILIES)
                layer.k_proj.weight = torch.nn.Parameter(torch.zeros_like(layer.k_proj.weight))
                assert torch.equal(compiled(ids).logits, m(ids).logits)
        finally:
            qt.unpatch(m)
            torch._dynamo.reset()
    assert torch.allclose(out, ref, atol=1e-4), (out - ref).abs().max().item()
    assert torch.allclose(out2, ref, atol=1e-4), (out2 - ref).abs().max().item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_fused_projections(family, device, counting, monkeypatch):
    """patch(fuse_projections=True): the q/k/v projections become one product
    over one weight tensor the three parameters view (state_dict unchanged),
    logits as the separate projections give them (float32: to GEMM rounding),
    fused again after model.to, and undone by unpatch."""
    ids = torch.randint(0, COMMON["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(11)).to(device)
    m = _model(family, torch.float32, device)
    state = {k: v.clone() for k, v in m.state_dict().items()}
    layers = [x for x in m.modules() if type(x).__name__ in qt.FAMILIES]
    separate = all(hasattr(x, "q_proj") for x in layers)
    linear = torch.nn.functional.linear
    products = [0]

    def counted(*a, **k):
        products[0] += 1
        return linear(*a, **k)
    monkeypatch.setattr(torch.nn.functional, "linear", counted)
    with torch.no_grad():
        qt.patch(m)
        products[0] = 0
        ref = m(ids).logits
        n_separate = products[0]
        qt.patch(m, fuse_projections=True)
        for k, v in m.state_dict().items():
            assert torch.equal(v, state[k]), k
        products[0], counting.calls = 0, 0
        out = m(ids).logits
        assert counting.calls == len(layers)
        if separate:  # one product instead of three in each layer
            assert products[0] == n_separate - 2 * len(layers), (products[0], n_separate)
            for x in layers:
                w = [getattr(x, n).weight for n in ("q_proj", "k_proj", "v_proj")]
                assert len({t.untyped_storage().data_ptr() for t in w}) == 1
        assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item()), (out - ref).abs().max().item()
        m.to(torch.bfloat16)  # the parameters are new tensors: the next forward fuses them again
        out16 = m(ids).logits.float()
        if separate:
            for x in layers:
                w = [getattr(x, n).weight for n in ("q_proj", "k_proj", "v_proj")]
                assert len({t.untyped_storage().data_ptr() for t in w}) == 1 and w[0].dtype == torch.bfloat16
        assert (out16 - ref).abs().max().item() <= 0.1 * ref.abs().max().item()
        qt.unpatch(m)
        m.to(torch.float32)
        products[0] = 0
        m(ids)
        assert products[0] == n_separate


def _small(family, dtype=torch.float32, **kw):
    """A 2-layer model of ``family`` with ``kw`` over a small base config
    (head dim 32 unless given), float32 unless given, random weights."""
    cfg_name, model_name, _ = CONFIGS[family]
    args = dict(COMMON, hidden_size=128, head_dim=32)
    if family == "phi3":  # its head dim is hidden_size / heads
        args.pop("head_dim")
    args.update(kw)
    cfg = getattr(transformers, cfg_name)(**args)
    cfg._attn_implementation = "eager"
    torch.manual_seed(4321)
    m = getattr(transformers, model_name)(cfg).eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
                mod.bias.uniform_(-0.5, 0.5)
            for n in ("q_norm", "k_norm"):
                norm = getattr(mod, n, None)
                if norm is not None:
                    norm.weight.uniform_(-0.5, 0.5)
    return m.to(dtype)


# family, config arguments, the reason the warning must name
REFUSED = [
    ("llama", dict(hidden_size=32, head_dim=8), r"head_dim 8 is odd or outside \[16, 1024\]"),
    ("qwen3", dict(rms_norm_eps=0.0), r"eps \(rms_norm_eps\) 0 is not a positive finite float32"),
    ("qwen3", dict(rms_norm_eps=1e-50), r"eps \(rms_norm_eps\) 1e-50 is not a positive finite float32"),
    ("gemma3", dict(rms_norm_eps=0.0, layer_types=["sliding_attention", "full_attention"]),
     r"eps \(rms_norm_eps\) 0 is not"),
]


@pytest.mark.parametrize("family,kw,reason", [r for r in REFUSED if r[0] in CONFIGS],
                         ids=lambda x: x if isinstance(x, str) else None)
def test_config_the_operator_cannot_take_is_refused(family, kw, reason, counting):
    """A config outside the operator's range (head_dim below 16, a norm eps
    that is not a positive float32) leaves every layer unpatched with a
    warning naming the config field, and the model runs as before."""
    m = _small(family, **kw)
    ids = torch.randint(1, COMMON["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = m(ids).logits
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert qt.patch(m) == []
        seen = [str(w.message) for w in seen if "qkvfuse" in str(w.message)]
        assert len(seen) == 2, seen
        for i, text in enumerate(seen):
            assert re.search(r"layers\.%d\.self_attn .*left unpatched: .*%s" % (i, reason), text), text
        counting.calls = 0
        assert torch.equal(m(ids).logits, ref) and counting.calls == 0


def test_different_q_and_k_norm_eps_is_refused():
    family = "qwen3" if "qwen3" in CONFIGS else pytest.skip("no Qwen3 in this transformers")
    m = _small(family)
    m.model.layers[1].self_attn.k_norm.variance_epsilon = 1e-3
    with pytest.warns(UserWarning, match=r"layers\.1\.self_attn .*left unpatched: its q_norm and k_norm have "
                                         r"different eps"):
        assert qt.patch(m) == ["model.layers.0.self_attn"]
    qt.unpatch(m)


def _fresh_pair(family, kw):
    """Two models with the same weights and no forward run yet (a dynamic or
    longrope rotary embedding keeps state from one forward to the next)."""
    return _small(family, **kw), _small(family, **kw)


def _prefill_decode_logits(m, ids, steps, position_ids=None):
    out = m(ids, position_ids=position_ids, use_cache=True)
    logits, cache = [out.logits], out.past_key_values
    nxt = out.logits[:, -1:].argmax(-1)
    for i in range(steps):
        pos = None if position_ids is None else position_ids[:, -1:] + 1 + i
        out = m(nxt, past_key_values=cache, position_ids=pos, use_cache=True)
        cache = out.past_key_values
        logits.append(out.logits)
        nxt = out.logits[:, -1:].argmax(-1)
    return torch.cat(logits, 1)


def _rope_configs():
    short = [1.0 + 0.2 * i for i in range(16)]
    long = [1.0 + 1.5 * i for i in range(16)]
    out = [
        # the table grows past max_position_embeddings (16) in the decode steps: recomputed per forward
        ("llama", dict(max_position_embeddings=16, rope_parameters=dict(rope_type="dynamic", factor=2.0,
                                                                         rope_theta=10000.0))),
        # short factors below original_max_position_embeddings (16), long ones from the decode steps on
        ("llama", dict(max_position_embeddings=64, rope_parameters=dict(
            rope_type="longrope", rope_theta=10000.0, original_max_position_embeddings=16, short_factor=short,
            long_factor=long, attention_factor=0.8))),
        ("phi3", dict(max_position_embeddings=64, original_max_position_embeddings=16, rope_parameters=dict(
            rope_type="longrope", rope_theta=10000.0, short_factor=short[:8], long_factor=long[:8],
            partial_rotary_factor=0.5), partial_rotary_factor=0.5)),
        ("qwen2", dict(num_key_value_heads=1, rope_parameters=dict(
            rope_type="yarn", factor=4.0, rope_theta=1e6, original_max_position_embeddings=16, attention_factor=1.3,
            beta_fast=16.0, beta_slow=2.0))),
        ("qwen3", dict(num_key_value_heads=4, rope_parameters=dict(
            rope_type="yarn", factor=8.0, rope_theta=1e6, original_max_position_embeddings=16, mscale=1.0,
            mscale_all_dim=0.5, truncate=False))),
        # local layers at theta 1000, global ones at 1e6 with linear scaling
        ("gemma3", dict(sliding_window=8, layer_types=["sliding_attention", "full_attention"], rope_parameters=dict(
            sliding_attention=dict(rope_type="default", rope_theta=1000.0),
            full_attention=dict(rope_type="linear", factor=8.0, rope_theta=1e6)))),
        ("glm4", dict(head_dim=32, partial_rotary_factor=0.1875, attention_bias=True)),  # R 6
    ]
    out = [c + (True,) for c in out]
    out.append(("phi3", dict(partial_rotary_factor=0.01), False))  # R 0: nothing to rotate, the original runs
    return [c for c in out if c[0] in CONFIGS]


@pytest.mark.parametrize("family,kw,fused", _rope_configs(), ids=lambda x: x if isinstance(x, str) else None)
@pytest.mark.parametrize("positions", ["default", "given"])
def test_rope_configs_match_unpatched(family, kw, fused, positions, counting):
    """Rope types whose table depends on the positions (dynamic, longrope),
    yarn's optional fields, Gemma-3's per-layer-type tables, small partial
    rotary dims, position ids given by the caller: a 12-token prefill of a
    batch of 2 and 8 decode steps (crossing the tables' 16-position
    switch), patched against an unpatched copy, float32. Given positions:
    one row offset by 3, the other repeating each position twice."""
    ids = torch.randint(1, COMMON["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(6))
    pos = None if positions == "default" else torch.stack([torch.arange(12) + 3, torch.arange(12) // 2])
    a, b = _fresh_pair(family, kw)
    with torch.no_grad():
        ref = _prefill_decode_logits(a, ids, 8, pos)
        names = qt.patch(b)
        assert len(names) == 2, names
        counting.calls = 0
        try:
            got = _prefill_decode_logits(b, ids, 8, pos)
        finally:
            qt.unpatch(b)
    assert counting.calls == (9 * 2 if fused else 0), counting.calls
    assert torch.allclose(got, ref, rtol=0, atol=1e-5 * ref.abs().max().item()), (got - ref).abs().max().item()


def test_other_threads_forwards_are_not_taken_for_the_patched_layer(counting):
    """While a patched layer's forward runs in one thread, a forward of an
    unpatched model of the same family in another thread runs its own code
    (the running layer is per thread)."""
    family = "qwen3" if "qwen3" in CONFIGS else sorted(CONFIGS)[0]
    a, b = _small(family), _small(family)
    with torch.no_grad():
        for p in b.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    ids = torch.randint(1, COMMON["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(8))
    seen = []

    def other_thread(module, args, output):  # runs inside a's patched layer 0, before its RoPE
        if not seen:
            t = threading.Thread(target=lambda: seen.append(b(ids).logits))
            t.start()
            t.join()
    with torch.no_grad():
        ref_a, ref_b = a(ids).logits, b(ids).logits
        qt.patch(a)
        hook = a.model.layers[0].self_attn.k_proj.register_forward_hook(other_thread)
        try:
            counting.calls = 0
            out_a = a(ids).logits
        finally:
            hook.remove()
            qt.unpatch(a)
    assert counting.calls == COMMON["num_hidden_layers"]
    assert torch.equal(seen[0], ref_b)
    assert torch.allclose(out_a, ref_a, rtol=0, atol=1e-5 * ref_a.abs().max().item())
