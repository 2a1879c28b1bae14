"""Sentences of docs/training.md that carry numbers, rendered from the result files by `experiments.claims.claims`
between markers `<!-- NAME:begin -->` and `<!-- NAME:end -->` (`BLOCKS`); `experiments/claims/test_claims.py` fails when one
is stale. Each function takes the parsed inputs (`claims.load_inputs`) and returns the text between the markers.
"""

from __future__ import annotations

from scipy.stats import fisher_exact

from experiments.claims import claim_checks as checks
from experiments.claims.claim_rows import interval, num, pct
from experiments.claims.claim_units import seed_units


def _missing(what: str) -> str:
    return f"({what}: no result file.)"


def kv4_gaps(data: dict) -> str:
    """The knocked-out W8/S8 4-KV-head models still have weak phases: their accuracy range and held-out gaps."""
    heads = data.get("heads")
    if heads is None or data.get("zoo") is None:
        return _missing("zoo_heads_w8s8-kv4.json or zoo.json")
    runs = [f"zoo-{heads['member']}-s{s}" for s in sorted(heads["seeds"], key=int)]
    rows = [r for r in checks.zoo_rows(data) if r.run in runs]
    lo = min(r.worst for r in rows)
    parts = []
    for run in runs:
        mine = {r.protocol: r for r in rows if r.run == run}
        parts.append(f"seed {run.rsplit('-s', 1)[1]} " + " / ".join(
            f"{num(mine[p].gap_pp)} {interval(mine[p].gap_ci)}" if p in mine else "-" for p in ("prefix", "insequence")))
    return (f"Both models retrieve at {pct(lo)}% or more at every residue, but not uniformly: held-out gaps (pp, "
            f"prefix / in-sequence; `zoo.json`) {', '.join(parts)}.")


def zoo_spectral(data: dict) -> str:
    """How many learned compressed zoo seeds have dominant period S where they have a phase effect (claim 1's rows,
    corrected as claim 1 corrects them)."""
    if data.get("zoo") is None:
        return _missing("zoo.json")
    rows = [r for r in checks.claim1(data).rows if r.source == data["_paths"]["zoo"]]
    units = [u for u in seed_units(rows) if u.effects]
    every = [u for u in units if all(r.spectral_ok for r in u.effects)]
    some = [u for u in units if u not in every and any(r.spectral_ok for r in u.effects)]
    none = [u for u in units if not any(r.spectral_ok for r in u.effects)]

    def other(u) -> str:
        return ", ".join([u.run] + [f"{r.protocol}: {r.dominant or 'none'}" for r in u.effects if not r.spectral_ok])

    return (f"By the spectral test, of the {len(units)} learned compressed seeds of `zoo.json` with a phase effect "
            f"(after claim 1's correction), {len(every)} have dominant period S in every protocol with one, "
            f"{len(some)} in one protocol only ({'; '.join(map(other, some)) or 'none'}), and {len(none)} in none "
            f"({'; '.join(map(other, none)) or 'none'}).")


def undemo3(data: dict) -> str:
    """W8/S8 seeds 0-5 under the rule and with `--min-undemonstrated 3`: shares learned and Fisher's exact test."""
    seeds, cards = data.get("undemo3_seeds"), [data.get("undemo3_s0"), data.get("undemo3_s1")]
    if seeds is None or None in cards or data.get("zoo") is None:
        return _missing("rule/seeds-w8s8-undemo3.json, rule/pilot-w8s8-undemo3-s{0,1}.json or zoo.json")
    zoo = {}
    for r in data["zoo"]["rows"]:
        if r["member"] == "w8s8" and r["seed"] in (0, 1):
            zoo[r["seed"]] = zoo.get(r["seed"], False) or bool(r["learned"])
    runs = seeds["runs"]
    rule = {**zoo, **{s: bool(runs[f"w8s8-rule-s{s}"]["learned"]) for s in range(2, 6)}}
    three = {**{c["seed"]: bool(c["phase_curve"]["learned"]) for c in cards},
             **{s: bool(runs[f"w8s8-undemo3-s{s}"]["learned"]) for s in range(2, 6)}}
    a, b = [s for s in sorted(rule) if rule[s]], [s for s in sorted(three) if three[s]]
    n_a, n_b = len(rule), len(three)
    p = fisher_exact([[len(a), n_a - len(a)], [len(b), n_b - len(b)]]).pvalue
    return (f"Over seeds 0-5, W8/S8 with one KV head learned in {len(a)} of {n_a} under the rule (seeds "
            f"{', '.join(map(str, a))}) and in {len(b)} of {n_b} with `--min-undemonstrated 3` (seeds "
            f"{', '.join(map(str, b))}); a two-sided Fisher exact test gives p = {p:.2f}, so {n_a} seeds per arm cannot "
            "tell the two shares apart: removing the shortcut did not raise the share, and whether it lowers it "
            "these runs do not say.")


#: The blocks of docs/training.md: marker name -> renderer (the rule's sweep, B7, is `claims.sweep_block`).
BLOCKS = {"kv4-gaps": kv4_gaps, "zoo-spectral": zoo_spectral, "w8s8-undemo3": undemo3}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def block(name: str, data: dict) -> str:
    """The block `name` with its markers."""
    begin, end = markers(name)
    return begin + BLOCKS[name](data) + end


__all__ = ["BLOCKS", "block", "kv4_gaps", "markers", "undemo3", "zoo_spectral"]
