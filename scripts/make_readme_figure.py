"""Regenerate assets/figures/phase_curve.png, the README's phase-curve figure: record-lookup
accuracy by needle residue (mod 8) of the shipped W4/S4 and full-attention checkpoints.

    python scripts/make_readme_figure.py [--out assets/figures/phase_curve.png] [--n-per-residue 128]

The plotly figure is written as self-contained HTML and screenshotted with headless Chromium
(`--browser`, default: the first of chromium, chromium-browser, google-chrome,
chromium-headless-shell on PATH); without a browser it falls back to kaleido (`pip install
kaleido`). CPU only, offline, about 10 seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import phaseinterp  # noqa: E402
from phaseinterp.measure import phase_sweep  # noqa: E402
from phaseinterp.plot import phase_figure  # noqa: E402
from phaseinterp.tasks import RecordLookup  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "assets" / "checkpoints"
WIDTH, HEIGHT = 900, 500
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chromium-headless-shell")


def build_figure(n_per_residue: int):
    card = json.loads((CHECKPOINTS / "w4s4.json").read_text())
    task = RecordLookup(**card["data"]["eval_task"])  # the task both checkpoints were evaluated on
    batch = task.sample(n_per_residue, modulus=8, seed=0)
    curves = {}
    for name, label in (("w4s4", "W4/S4 compressed attention"), ("full", "full attention")):
        model = phaseinterp.load(CHECKPOINTS / f"{name}.safetensors")
        curves[label] = phase_sweep(model, batch, period=4, progress=False, label=label)
        print(curves[label])
    fig = phase_figure(curves, periods=[4],
                       title="Record lookup accuracy by needle position mod 8 (shipped checkpoints)")
    fig.update_layout(width=WIDTH, height=HEIGHT, margin=dict(l=70, r=30, t=60, b=100),
                      legend=dict(orientation="h", x=0.5, y=-0.2, xanchor="center", yanchor="top"),
                      xaxis_title="needle residue r = key position mod 8 (window boundary every S = 4)")
    return fig


def screenshot(fig, out: Path, browser: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "figure.html"
        body = fig.to_html(full_html=False, include_plotlyjs=True, config={"displayModeBar": False, "staticPlot": True})
        html.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
                        f'<body style="margin:0;background:white">{body}</body></html>')
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--virtual-time-budget=10000", f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={out}",
               html.as_uri()]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "assets" / "figures" / "phase_curve.png")
    p.add_argument("--n-per-residue", type=int, default=128, help="logical examples per residue (default 128)")
    p.add_argument("--browser", help="Chromium-like browser binary (default: found on PATH)")
    args = p.parse_args()
    torch.set_num_threads(1)
    fig = build_figure(args.n_per_residue)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    browser = args.browser or next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser:
        screenshot(fig, args.out, browser)
    else:
        fig.write_image(args.out, width=WIDTH, height=HEIGHT)  # kaleido
    size = args.out.stat().st_size
    print(f"wrote {args.out} ({size / 1024:.0f} KiB, {'screenshot by ' + browser if browser else 'kaleido'})")
    if size > 200 * 1024:
        raise SystemExit(f"{args.out} is {size / 1024:.0f} KiB: keep the README figure under 200 KiB")


if __name__ == "__main__":
    main()
