"""The studies register their models: `assets/catalog.json` lists every carded checkpoint of the
repository's `assets/` outside the core set the wheel carries (the zoo, NSA, the variants, more seeds),
so that `phaseinterp.load(NAME)` and `phaseinterp models` know them from a checkout or from
`PHASEINTERP_HOME=/path/to/phaseinterp/assets`.

    python -m experiments.catalog          # rewrites assets/catalog.json (a test fails when it is stale)
"""

from __future__ import annotations

from pathlib import Path

from phaseinterp.catalog import write_listing

ASSETS = Path(__file__).resolve().parents[1] / "assets"

if __name__ == "__main__":
    print(f"wrote {write_listing(ASSETS)}")
