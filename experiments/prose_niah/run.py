"""The classic needle in a haystack (Paul Graham essays) on real pretrained models under training-free
chunked compression and selection presses, by phase of the needle and of the question.

    python -m experiments.prose_niah.run scan --model smollm2              # 1. the regime (below)
    python -m experiments.prose_niah.run grid --model smollm2 --settings none mean-W8S8 ...
    python -m experiments.prose_niah.run kept --model smollm2 ...            # what a static chunk press keeps (kept.py)
    python -m experiments.prose_niah.run survivors --model smollm2          # the needle tokens evict keeps (survivors.py)
    python -m experiments.prose_niah.run rescue --model smollm2 ...          # evict keeping a chosen needle token (rescue.py)
    python -m experiments.prose_niah.run render                            # README + docs page from the files, and finding B8 of the claims page

The regime rule, stated before any run. "Compress every layer" scores 0% at every residue (SmolLM2,
W8/S8 mean, 64-token local window, 4-token sink, 1k tokens), which says nothing about phase, so each
model first gets a regime: which layers are compressed. Candidates (`CANDIDATES`, most compressed first)
run under W8/S8 mean with a 64-token local window and a 4-token sink at `--length` tokens, `--n` prompts
per residue mod 8 (the value's first token at the residue). The regime is the first candidate whose mean
accuracy lies in [0.25, 0.75]; if none does, the candidate whose mean is nearest 0.5, the least compressed
of ties (the page says so).
Every setting of the grid (rules, W16/S8, the presses at `BUDGET` chunks) then uses that regime.
(Amended once, before any grid unit ran: the first SmolLM2 pass jumped from 0.0 with layers 15-29 to
0.875 with 22-29, so 18-29 and 20-29 were added between them. Gemma 3 270M's first pass had only "all"
and "global" (its 3 global layers), both 0.0 while the uncompressed model scored 1.0, so pairs and single
global layers were added after them, and ties of "nearest 0.5" go to the least compressed candidate
(every Gemma candidate scored 0.0 or 1.0), before any Gemma grid unit ran.)

Presses get a regime of their own. In SmolLM2's mean regime (layers 20-29) both selection presses scored
1.00 at every residue, which cannot tell whether the chunk grid makes weak phases, so (stated before any
press scan ran) `scan --scan-setting chunk-S8` runs the same candidates under the chunk press, the same rule
picks its regime (file regime-chunk-S8.json), and `grid --regime chunk-S8` runs both presses (chunk-S8
and its token-level control token-S8) there. (Amended after its first two candidates: with all 30 layers
pressed, and with 15-29, chunk-S8 at 4 chunks scored 1.00, so the layer scan cannot leave the ceiling.
The press regime then keeps all 30 layers and lowers the budget, most compressed first: `chunk-S8k1`
(1 chunk of 8, the token control 8 single tokens), then `chunk-S8k2`, by the same rule, each scanned with
`scan --scan-setting chunk-S8kB --candidates 0-29`; `grid --regime chunk-S8kB --settings chunk-S8kB
token-S8kB` runs both presses at the chosen budget. Prediction stated before it runs: the value is 4 digit
tokens, so with 1 chunk kept a value whose first token sits at residue 5, 6 or 7 straddles two chunks and
cannot be kept whole: the chunk press is weaker there; the token press keeps any 8 tokens and shows no
phase effect.) Both budgets scored 1.00 (n1): every answer query reselects its own chunk, so a value split
over two chunks is read one chunk at a time. That is dynamic selection; the presses practitioners use
(kvpress's SnapKV, ChunkKV) select once, at the end of prefill, by the question's attention, and decoding
reads that cache. So (stated before they run) the press units that answer the question are static:
`chunk-S8k1-static` and `token-S8k1-static` (`SelectionPress(prefill=prompt length, observe=16)`), all 30
layers, n8, same prompts. The first answer digit comes from prefill (full attention); digits 2-4 read the
compressed cache. Prediction: the chunk press loses digits of values whose 4 tokens straddle a chunk
boundary (first token at residue 5, 6 or 7); the token press shows no phase effect.

Units at 4,096 tokens run in the model's 1,024-token regime (its layers, local window and sink): a rule
that rescanned at each length would compare different compressions across lengths. They run with
`--n-depths N` equal to their n (example e sits at depth (e mod n_depths + 0.5) / n_depths, so n4 with the
default 8 depths would never place a needle in the second half of the context; the first n2 units, run
with 8 depths, cover depths 1/16 and 3/16 only).

Gemma 3 270M's presses (stated before they ran): the same static units as SmolLM2's at the same budget
(`grid --model gemma3-270m --layers all --settings chunk-S8k1-static token-S8k1-static`), every layer pressed
(on its sliding layers the press selects inside the 512-token window). No scan: SmolLM2's dynamic press scans
sat at 1.00 at every candidate, and the static timing is what practitioners run. Same prediction.
The chunk unit ran at n8; a pressed Gemma prompt costs about 45 s on this machine's CPU, so the time went to
Gemma's decode-time unit (`grid --model gemma3-270m --n 8 --anchor question --settings mean-W8S8`) first and
the token unit ran last, at n4 (SmolLM2's token unit at this budget sat at floor).

The evict rule keeps one token of each W-token window (offset W-1 by default: the positions that are 7 mod 8
under W8/S8). After SmolLM2's evict-W8S8 unit (n8) scored 1.00 at residue 7 and at most 0.25 elsewhere, one
prediction was stated before running `evict0-W8S8` (offset 0): if the surviving token is what carries
retrieval, the strong residue moves from 7 to 0.

Units grown to n32 (stated before they ran; each n8 unit's prompts are its n32 unit's first 8, so only the
n32 unit enters the Holm family): SmolLM2's static chunk press (`grid --model smollm2 --n 32 --layers 0-29
--settings chunk-S8k1-static`; prediction: weak at residues 0-2 and 5-7, strong at 3-4, as at n8) and
evict0-W8S8 (`grid --model smollm2 --n 32 --settings evict0-W8S8`; prediction: the strongest residue is 0).
Queued behind them: SmolLM2's decode-time evict unit (`--anchor question`; prediction: no effect of the question's
phase), Gemma's static chunk press (`--layers all`; prediction as at n8: weak at 0-2 and 5-7), SmolLM2's
score-W8S8 and mean-W16S8 (prediction: no effect, as at n8), and Gemma's evict-W8S8 (no prediction: its n8
unit showed no effect, Holm p = 0.71 over 15 tests then).

Decode time under evict (stated before these units' results were read): SmolLM2's evict-W8S8 question-anchor
unit (n8) keeps each example's needle where it is and moves the question by 0..7 tokens; the kept positions
are fixed by the absolute grid, so prediction: no effect of the question's phase (accuracy near the value
anchor's mean at every residue). Evict-W8S8 at 4,096 tokens (n2 at depths 1/4 and 3/4: a 4k prompt
costs about 2 minutes on this machine's CPU; the 1k regime): the strong residue stays at 7.

The token press above floor (stated 2026-12-07, before these units ran). At 1 chunk of budget (8 tokens) the
token press scored 0.00 at every residue (SmolLM2 n8, Gemma n4): a control that cannot fail. So the budget
is scanned, static, every layer, n4: `grid --model M --n 4 --layers L --settings token-S8k2-static
token-S8k4-static token-S8k8-static` (16, 32, 64 tokens; L = 0-29 for SmolLM2, all for Gemma). The budget is the
smallest whose token-press mean lies in [0.25, 0.75], else the one nearest 0.5 (the smaller of ties); then
`grid --n 32` runs token-S8kB-static and chunk-S8kB-static at that budget B. Predictions: the token press shows
no phase effect; the chunk press, which keeps B whole chunks, still shows weak phases (no prediction of which).
(Amended after SmolLM2's scan read 0.00 at every residue at 16, 32 and 64 tokens, before any budget's n32 unit
ran: a model whose token press sits at floor at every scanned budget continues the scan at `token-S8k16-static`
and `token-S8k32-static`, 128 and 256 tokens, by the same rule; the chunk press runs at the budget it picks.)
The scans' choice (their n4 units are on the page): Gemma k16 (128 tokens, the first budget in range), SmolLM2 k2
(no budget through 256 tokens left floor: nearest 0.5 is every budget, the smaller of ties).

Gemma 3 270M's pooling and decode-time units grown to n32 (stated 2026-12-07, before they ran; three of their n8
units had no power): `grid --model gemma3-270m --n 32 --settings mean-W8S8 score-W8S8 mean-W16S8` and `grid --model
gemma3-270m --n 32 --anchor question --settings mean-W8S8`. Predictions: no phase effect for mean-W8S8, mean-W16S8
and the question anchor; none for score-W8S8 (SmolLM2's score unit at n32 showed weak phases against its
prediction of none). (Wording made plain after the unit ran, meaning unchanged: "none" is no prediction, as
predictions.py held it before the run; Gemma's score unit enters the page without a stated prediction.)
`experiments/prose_niah/predictions.py` holds every prediction above as data.

Stated 2026-12-07 (fourth session), before these units ran: SmolLM2's decode-time mean unit at n32 (`grid --model
smollm2 --n 32 --anchor question --settings mean-W8S8`; its n8 unit had no power; prediction: no effect of the
question's phase), SmolLM2 at 4,096 tokens at n8 (`grid --model smollm2 --length 4096 --n 8 --n-depths 8 --settings
evict-W8S8 none`; prediction for evict: the strong residue stays at 7, as stated for n2; the uncompressed unit is the
reference, no prediction) and the KV-head knockout map at n8 (`knockout --model smollm2 --n 8 --n-boot 30000
--settings mean-W8S8`: enough bootstrap draws that a lone cell can pass BH-FDR over 720 cells; no prediction),
and Gemma 3 270M at 4,096 tokens in its 1k regime (`grid --model gemma3-270m --length 4096 --n 4 --n-depths 4
--settings none evict-W8S8`; prediction for evict: weak phases, as at 1k, no prediction of which residues; the
uncompressed unit is the reference). Then SmolLM2's static chunk press at its 1k budget at 4,096 tokens (`grid
--model smollm2 --length 4096 --n 8 --n-depths 8 --layers 0-29 --settings chunk-S8k2-static chunk-S8k1-static`);
prediction for k2: strong at residues 0-4, weak at 5-7, as at 1,024 tokens (k1: no prediction).

Amended after these units' results were read (2026-12-07): a unit whose outcomes could not reach p < 0.05
however they fell across residues (`render.powerless`: the permutation test conditions on each example's count
of right answers) leaves the Holm family and reads "no power" (Tarone's rule); before, such units counted as
"no phase effect" and each one raised the others' corrected p-values.

Two changes of how a unit is computed, not of what (2026-12-07): the sweep of an HF model runs each prompt once
(`HFMixin.sweep_logits`; before, each of a prompt's answer tokens ran its own forward, through nnsight), and
static presses run fused (`PressedLlamaAttention.materializes`: the prompt's queries through fused attention,
no T x T kept sets; inside an nnsight trace they had built them). Same answers and logits within float32
summation error (`benchmarks/static_press.json`; recomputing the first journal minibatches of the two units
under way gave the same correctness on 48 of 48 and 32 of 32 answer tokens; Gemma's static chunk press at n32, new path,
equals its n8 unit, old path, on all 64 shared rows). Those two units ran partly on the
old path: SmolLM2's chunk-S8k1-static n32 minibatches 0-74, its question-anchor evict-W8S8 n32 minibatches 0-83
(the journals under runs/prose_niah/ keep each minibatch).

Stated 2026-12-07 (fifth session), before these units ran: SmolLM2's two 4,096-token units that showed weak phases
at n8 grow to n32, the issue's count (`grid --model smollm2 --length 4096 --n 32 --n-depths 8 --settings evict-W8S8`
and `grid --model smollm2 --length 4096 --n 32 --n-depths 8 --layers 0-29 --settings chunk-S8k2-static`; with 8
depths each n8 unit's prompts are its n32 unit's first 8, so only the n32 unit enters the Holm family). Predictions,
as at n8: evict's strongest residue is 7; the chunk press is strong at residues 0-4 and weak at 5-7.
Then, in this order: SmolLM2's KV-head knockout map at n8 is computed again by its own command, to add the test of each
head with its residues pooled (`SpecializationMap.pooled`, BH over the 90 heads), which its file predates (the cells
must equal the committed file's; no prediction: its strongest cells, at L1.KV0, were read before); the uncompressed
SmolLM2 at 4,096 tokens grows to n32 (the reference; no prediction); and the 1-chunk static press at 4,096 tokens (n8,
stated above, no prediction).

A change of how Gemma 3 270M's units are computed, not of what (2026-12-07, sixth session): it loads with windowed
attention (`load_gemma3_270m(attention="windowed")`, `backends.windowed_attention`: its sliding layers read only their
window, by blocks of queries, through HF's sdpa), where it had loaded with HF's eager attention: the same answer
tokens and logits within float32 error, in less time (`benchmarks/results/windowed_attention.json`, docs/performance.md).
Unit files written since record `attention`; the ones without it ran eager.

Stated 2026-12-07 (sixth session), before it ran: Gemma 3 270M's evict-W8S8 unit at 4,096 tokens grows to n32 (`grid
--model gemma3-270m --length 4096 --n 32 --n-depths 8 --settings evict-W8S8`; its n4 unit had no power). Prediction,
as for n4: weak phases at 4,096 tokens, as at 1,024; no prediction of which residues.

Stated 2026-12-07 (seventh session), before they ran: SmolLM2 at 4,096 tokens under two more rules of its regime, at
n8 (`grid --model smollm2 --length 4096 --n 8 --n-depths 8 --settings evict0-W8S8 score-W8S8`). Predictions: evict0
(keeps offset 0 of each window) is strongest at residue 0, the kept offset, as at 1,024 tokens (evict, offset 7, is
strongest at 7 at 4,096); score shows weak phases, as at 1,024 tokens (no prediction of which residues).
Stated after the n8 units were read, before it ran: evict0 at 4,096 tokens grows to n32 (`grid --model smollm2
--length 4096 --n 32 --n-depths 8 --settings evict0-W8S8`); prediction, as for n8: strongest at residue 0.

Stated 2026-12-07 (eighth session), before it ran: the first decode-time unit at 4,096 tokens, SmolLM2's question
anchor under evict-W8S8 (`grid --model smollm2 --length 4096 --n 32 --n-depths 8 --anchor question --settings
evict-W8S8`; the needle stays where it is, the question moves by 0..7 tokens). Prediction, as at 1,024 tokens: no
effect of the question's phase.
Stated while SmolLM2's evict0-W8S8 unit at 4,096 tokens (n32) ran, before its journal was read (its first 8
prompts per residue are the n8 unit's, on the page), after reading the evict units already on the page
(`experiments/prose_niah/survivors.py`): evict keeps the positions K mod 8, so a digit of the 4-token value
survives at four residues (4-7 for K = 7, 0 and 5-7 for K = 0); at 1,024 tokens those four were SmolLM2's four
best residues under both offsets, and at 4,096 under K = 7. Prediction for evict0 at 4,096 tokens, n32: residues
0, 5, 6 and 7 score above the other four (the survivor gap's 95% interval, examples resampled, lies above 0).
Stated before they ran (eighth session), queued behind the two units above: SmolLM2's score-W8S8 at 4,096 tokens
grows to n32 (`grid --model smollm2 --length 4096 --n 32 --n-depths 8 --settings score-W8S8`; prediction, as stated
for n8, which did not hold: weak phases, as at 1,024 tokens) and Gemma 3 270M's mean-W8S8 at 4,096 tokens, n32
(`grid --model gemma3-270m --length 4096 --n 32 --n-depths 8 --settings mean-W8S8`, its 1k regime; prediction: no
phase effect, as at 1,024 tokens).

Rescue by one kept token (`experiments/prose_niah/rescue.py`), stated before any rescue unit ran, after the
survivors table was read: under evict-W8S8 at 1,024 tokens every compressed layer and KV head keeps a chosen
needle token in its window instead of the evict offset (same budget). SmolLM2 (`rescue --model smollm2 --n 8
--settings evict-W8S8 --shifts 0 -2`): keeping the value's first digit (shift 0) rescues retrieval, its gain over
the residues where evict keeps another token having a 95% interval above 0; keeping " is" (shift -2) does not
(its interval reaches 0 or below). Gemma 3 270M (`rescue --model gemma3-270m --n 8 --settings evict-W8S8 --shifts
0 -2`), whose best residue keeps " is" and whose survivor gap is not above 0: the reverse, keeping " is" gains
(interval above 0) and keeping the first digit does not.
Stated after both 1,024-token rescue units were read (both predictions held), before it ran: Gemma 3 270M's rescue
at 4,096 tokens (`rescue --model gemma3-270m --length 4096 --n 8 --n-depths 8 --settings evict-W8S8 --shifts 0 -2`),
where its survivor gap is below 0 and its best residue again keeps " is". Prediction, as at 1,024 tokens: keeping
" is" gains (interval above 0), keeping the first digit does not. (A change of how, not what, before it ran: the
rescue forwards now compute logits only from the first answer position on, the same correctness as the full logits
the 1,024-token units used, tested; a 4k prompt's full logits over Gemma's vocabulary would take 4 GB.)

Every unit (model, length, anchor, setting) is one file under assets/results/prose_niah/, written once
it is finished (a unit already there is skipped: the queue resumes; within a unit `phase_sweep`'s journal
under runs/prose_niah/ keeps finished minibatches, each with its compute time: a resumed unit's `seconds` adds the
time its journal recorded; units resumed before the time was kept count only their last run's, and say how many
minibatches had no time in `seconds_untimed` when resumed after). Accuracy is teacher-forced exact match of every
answer token; curves have cluster-bootstrap intervals and two tests (no phase effect: permutation of
accuracy against residue; period: accuracy depends on the residue only through residue mod S).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from phaseinterp.backends.presses import apply_attention
from phaseinterp.measure.outputs import write_atomic

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "assets" / "results" / "prose_niah"
JOURNAL = ROOT / "runs" / "prose_niah"
MODULUS = 8
LOCAL, SINK, BUDGET = 64, 4, 4
#: compressed layers of each regime candidate, most compressed first ("global": Gemma 3's global layers)
CANDIDATES: dict[str, tuple[str, ...]] = {
    "smollm2": ("0-29", "15-29", "18-29", "20-29", "22-29", "26-29", "28-29", "29-29"),
    "gemma3-270m": ("all", "global", "11,17", "5,17", "5,11", "17", "11", "5"),
}
LOW, HIGH = 0.25, 0.75
OBSERVE = 16  # a static press scores the prompt's keys by the attention of its last OBSERVE queries (the question)
SCAN = "mean-W8S8"  # the setting a regime scan runs its candidates under, unless --scan-setting says otherwise


def layers_of(model: Any, spec: str) -> tuple[int, ...]:
    """The layer indices of a candidate: "A-B" (inclusive), "A,B,..." (a list; "A" alone: one layer),
    "all" or "global" (Gemma 3)."""
    n = model.config.num_hidden_layers
    if spec == "all":
        return tuple(range(n))
    if spec == "global":
        from phaseinterp.families.gemma3.attention import global_layers

        return tuple(global_layers(model))
    a, dash, b = spec.partition("-")
    items = [a, b] if dash else spec.split(",")
    if not all(x.isdigit() and int(x) < n for x in items) or (dash and int(a) > int(b)):
        raise ValueError(f"layers={spec!r} is invalid: allowed 'A-B' with 0 <= A <= B < {n}, 'A,B,...' with "
                         f"each below {n}, 'all' or 'global'")
    return tuple(range(int(a), int(b) + 1)) if dash else tuple(sorted({int(x) for x in items}))


def setting(name: str, layers: tuple[int, ...], batch: Any = None) -> Any:
    """The compression of a setting name: "none", "RULE-WxSy" (`KVCompression`: mean, score, evict
    keeping offset W-1, or evictK keeping offset K) or "chunk-Sy" / "token-Sy" (`SelectionPress` at
    `BUDGET` chunks; "chunk-SykB" at B chunks; "...-static": a static press, kvpress timing, prefilling
    `batch`'s prompts and compressing by the attention of their last `OBSERVE` queries), all with the
    regime's layers.

    Example:
        >>> setting("evict0-W8S8", (20,)).name, setting("evict-W8S8", (20,)).kept_offset
        ('W8/S8 evict0@post L64 sink4', 7)
    """
    from phaseinterp.backends.kv_compression import KVCompression
    from phaseinterp.backends.presses import SelectionPress
    from phaseinterp.tasks.scoring import prompt_length

    if name == "none":
        return None
    kind, _, geometry = name.partition("-")
    geometry, static, tail = geometry.partition("-static")
    chunk, k, budget = geometry[1:].partition("k")
    if static and batch is None:
        raise ValueError(f"setting={name!r} needs the batch: a static press prefills its prompts")
    if (kind in ("chunk", "token") and geometry[:1] == "S" and chunk.isdigit() and (budget.isdigit() or not k)
            and not tail):
        return SelectionPress(kind, int(chunk), int(budget or BUDGET), local=LOCAL, sink=SINK, layers=layers,
                              **({"prefill": prompt_length(batch), "observe": OBSERVE} if static else {}))
    w, _, s = geometry[1:].partition("S")
    offset = kind[5:] if kind.startswith("evict") else ""
    rule = "evict" if offset.isdigit() else kind
    if rule in ("mean", "score", "evict") and geometry[:1] == "W" and w.isdigit() and s.isdigit():
        return KVCompression(int(w), int(s), rule, local=LOCAL, sink=SINK, layers=layers,
                             offset=int(offset) if offset else None)
    raise ValueError(f"setting={name!r} is invalid: allowed 'none', 'RULE-WxSy' (RULE mean, score, evict, or "
                     "evictK: evict keeping offset K of each window) or 'chunk-Sy' / 'token-Sy' (optionally 'kB': "
                     f"B chunks kept, default {BUDGET}; '-static' at the end: a static press)")


def load(name: str) -> tuple[Any, str]:
    import torch

    torch.set_num_threads(1)
    if name == "smollm2":
        from phaseinterp.backends.smollm2 import load_smollm2

        return load_smollm2()[0].eval(), name
    if name == "gemma3-270m":
        from phaseinterp.families.gemma3.load import load_gemma3_270m

        return load_gemma3_270m(attention="windowed")[0].eval(), name  # logits only: no attention weights read
    raise ValueError(f"model={name!r} is invalid: allowed {sorted(CANDIDATES)}")


def regime_path(model: str, scan_setting: str) -> Path:
    """The scan's verdict: regime.json for the default scan (W8/S8 mean), regime-SETTING.json for another."""
    return RESULTS / model / ("regime.json" if scan_setting == SCAN else f"regime-{scan_setting}.json")


def unit_path(model: str, length: int, anchor: str, name: str, layers: str, n: int, folder: str = "") -> Path:
    """A unit's file: the grid's under RESULTS/MODEL/, the regime scan's under RESULTS/MODEL/scan/."""
    return RESULTS / model / folder / f"T{length}-{anchor}-{name}-L{layers}-n{n}.json"


def seconds(start: float, resumed: dict[str, Any] | None) -> dict[str, Any]:
    """A unit's compute time: this run's, plus what its journal recorded for the parts earlier runs computed
    ("seconds_untimed": how many of those parts had no recorded time, journals before it was kept)."""
    resumed = resumed or {}
    return {"seconds": round(time.time() - start + resumed.get("seconds", 0.0), 1),
            **({"seconds_untimed": resumed["untimed"]} if resumed.get("untimed") else {})}


def run_unit(model, tok: str, args: argparse.Namespace, name: str, layers: str, anchor: str,
             folder: str = "") -> dict[str, Any]:
    """One (length, anchor, setting, layers) unit: its phase curve and depth x phase grid, written to its
    file (returned from the file when it exists)."""
    from phaseinterp.measure import depth_phase_grid, phase_sweep
    from phaseinterp.measure.provenance import versions
    from phaseinterp.tasks import ProseNeedle

    layers = "none" if name == "none" else layers  # the uncompressed model has no regime
    path = unit_path(args.model, args.length, anchor, name, layers, args.n, folder)
    if path.exists():
        return json.loads(path.read_text())
    task = ProseNeedle(tok, seq_len=args.length, n_depths=args.n_depths, anchor=anchor)
    batch = task.sample(args.n, MODULUS, seed=args.seed)
    how = setting(name, () if name == "none" else layers_of(model, layers), batch)
    apply_attention(model, how)
    period = None if how is None else getattr(how, "stride", getattr(how, "chunk", None))
    start = time.time()
    curve = phase_sweep(model, batch, batch_size=args.batch_size, period=period, progress=False, n_boot=args.n_boot,
                        n_perm=args.n_perm, seed=args.seed, label=f"{args.model} {name}",
                        resume=JOURNAL / path.relative_to(RESULTS).with_suffix(""))
    grid = depth_phase_grid(curve.correct, batch, n_bins=args.n_depths, label=name)
    apply_attention(model, None)
    result = {"model": args.model, "length": args.length, "anchor": anchor, "setting": name, "layers": layers,
              "compression": None if how is None else {"class": type(how).__name__, **how.to_dict()},
              "attention": model.config._attn_implementation, "n_per_residue": args.n, "modulus": MODULUS, "seed": args.seed, "task": task.card(),
              "summary": curve.to_dict()["summary"], "curve": curve.to_dict(), "grid": grid.to_dict(),
              **seconds(start, curve.config.get("resumed")),
              "command": "python -m experiments.prose_niah.run " + " ".join(args.argv),
              "versions": versions()}
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1, default=float) + "\n"
    write_atomic(path, text)  # a unit file exists only when finished
    result = json.loads(text)  # as a rerun reads it back
    s = result["summary"]
    print(f"{path.name}: mean {s['mean']:.3f}, worst r={s['worst_residue']} {s['worst']:.3f}, "
          f"p {s['p_value']:.3g}, {result['seconds']} s", flush=True)
    return result


def run_knockout(model, tok: str, args: argparse.Namespace, name: str, layers: str) -> dict[str, Any]:
    """KV-head knockout map (mean over a disjoint calibration batch, final-position path) of the model
    under `name` in the regime, written to its file (read back when it exists)."""
    from phaseinterp.interventions import knockout_map
    from phaseinterp.tasks import ProseNeedle

    path = RESULTS / args.model / f"knockout-T{args.length}-{name}-L{layers}-n{args.n}.json"
    if path.exists():
        return json.loads(path.read_text())
    task = ProseNeedle(tok, seq_len=args.length, n_depths=args.n_depths)
    batch = task.sample(args.n, MODULUS, seed=args.seed)
    how = setting(name, layers_of(model, layers), batch)
    calibration = task.sample(args.n, MODULUS, seed=args.seed, split="calibration")
    apply_attention(model, how)
    start = time.time()
    smap = knockout_map(model, batch, calibration, level="kv_head", n_boot=args.n_boot, seed=args.seed, max_rows=args.batch_size,
                        progress=False, label=f"{args.model} {name} L{layers}",
                        resume=JOURNAL / path.relative_to(RESULTS).with_suffix(""))
    apply_attention(model, None)
    significant, which = smap.significance("fdr")
    result = {"model": args.model, "length": args.length, "setting": name, "layers": layers, "n_per_residue": args.n,
              "modulus": MODULUS, "seed": args.seed, "map": smap.to_dict(), **seconds(start, smap.meta.get("resumed")),
              "significant_fdr_cells": int(np.sum(significant)) if significant is not None else None, "which": which,
              "command": "python -m experiments.prose_niah.run " + " ".join(args.argv)}
    write_atomic(path, json.dumps(result, default=float) + "\n")
    print(f"{path.name}: {result['significant_fdr_cells']} cells significant after FDR, {result['seconds']} s", flush=True)
    return result


def choose_regime(rows: list[tuple[str, float]]) -> tuple[str, str]:
    """(layers, why) from the scan's (candidate, mean accuracy) rows in `CANDIDATES` order (module docstring).

    Example:
        >>> choose_regime([("0-29", 0.0), ("15-29", 0.3), ("22-29", 0.6)])
        ('15-29', 'first candidate with mean in [0.25, 0.75]')
        >>> choose_regime([("0-29", 0.0), ("15-29", 0.9)])[0]
        '15-29'
        >>> choose_regime([("all", 0.0), ("11", 0.0), ("17", 1.0)])[0]  # a cliff: the least compressed of ties
        '17'
    """
    if not rows:
        raise ValueError("rows=[] is invalid: the regime rule needs the scan's candidates")
    for layers, mean in rows:
        if LOW <= mean <= HIGH:
            return layers, f"first candidate with mean in [{LOW}, {HIGH}]"
    layers = min(reversed(rows), key=lambda r: abs(r[1] - 0.5))[0]
    return layers, f"no candidate in [{LOW}, {HIGH}]: the one nearest 0.5, the least compressed of ties"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("scan", "grid", "knockout", "kept", "rescue", "survivors", "render"))
    p.add_argument("--model", choices=sorted(CANDIDATES), default="smollm2")
    p.add_argument("--length", type=int, default=1024)
    p.add_argument("--n", type=int, default=1, help="prompts per residue mod 8")
    p.add_argument("--n-depths", type=int, default=8)
    p.add_argument("--settings", nargs="+", default=["none", "mean-W8S8"])
    p.add_argument("--layers", help="the regime's layers (default: chosen by the scan's file, see --regime)")
    p.add_argument("--scan-setting", default=SCAN, help=f"scan: the setting the candidates run under (default {SCAN})")
    p.add_argument("--candidates", nargs="+", help="scan: the layer candidates, most compressed first (default: "
                   "CANDIDATES of the model)")
    p.add_argument("--regime", default=SCAN, help=f"grid, knockout: whose scan picks the layers (default {SCAN})")
    p.add_argument("--anchor", choices=("value", "question"), default="value")
    p.add_argument("--shifts", type=int, nargs="+", default=[0], help="rescue: the kept needle tokens, by offset from "
                   "the value's first token")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--n-perm", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.argv = argv
    if args.what == "render":
        from experiments.claims.claims import main as write_claims
        from experiments.prose_niah.render import write_pages

        write_pages()
        write_claims([])  # finding B8 reads the same unit files
        return
    if args.what == "survivors":  # the tokenizer alone
        from experiments.prose_niah.survivors import write_survivors

        write_survivors(args.model, args, RESULTS, MODULUS)
        return
    model, tok = load(args.model)
    if args.what == "scan":
        rows = []
        for layers in args.candidates or CANDIDATES[args.model]:
            r = run_unit(model, tok, args, args.scan_setting, layers, "value", folder="scan")
            rows.append((layers, r["summary"]["mean"]))
            if LOW <= rows[-1][1] <= HIGH:
                break  # the rule reads no further than the first candidate in range
        layers, why = choose_regime(rows)
        scan = {"model": args.model, "length": args.length, "n_per_residue": args.n, "setting": args.scan_setting,
                "rows": rows, "regime": layers, "why": why, "rule": "experiments/prose_niah/run.py (module docstring)"}
        write_atomic(regime_path(args.model, args.scan_setting), json.dumps(scan, indent=1) + "\n")
        print(f"regime of {args.model} under {args.scan_setting}: layers {layers} ({why})")
        return
    layers = args.layers or json.loads(regime_path(args.model, args.regime).read_text())["regime"]
    for name in args.settings:
        if args.what == "kept":
            from experiments.prose_niah.kept import kept_unit

            args.modulus = MODULUS
            kept_unit(model, tok, args, name, layers, RESULTS, setting, layers_of)
        elif args.what == "rescue":
            from experiments.prose_niah.rescue import rescue_unit

            args.modulus = MODULUS
            rescue_unit(model, tok, args, name, layers, RESULTS, setting, layers_of)
        elif args.what == "knockout":
            run_knockout(model, tok, args, name, layers)
        else:
            run_unit(model, tok, args, name, layers, args.anchor)


if __name__ == "__main__":
    main()
