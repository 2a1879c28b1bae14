"""The prepared CUDA check (scripts/gpu_check.py) runs on CPU: every step of two backend families in
float32 and bfloat16 succeeds, and float32 agrees with the CPU reference exactly (the dtype probe: a
tensor left in float32, or a bfloat16 tensor handed to numpy, fails here before it fails on a GPU)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_dry_run_passes_on_cpu_in_both_dtypes(tmp_path):
    out = tmp_path / "check.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--cases", "ours-w4s4",
                    "hf-qwen3", "--n-boot", "30", "--out", str(out)], check=True, cwd=tmp_path, capture_output=True)
    report = json.loads(out.read_text())
    assert report["summary"]["failed"] == [] and report["summary"]["steps"] == 18
    assert report["summary"]["float32_sweeps_equal_cpu"]
    for row in report["rows"]:
        diff = row["final_logits"]["max_abs_diff_vs_cpu_float32"]
        assert diff == 0.0 if row["dtype"] == "float32" else 0 < diff < 0.25 * row["final_logits"]["logit_scale"]
        assert row["sweep"]["agreement_with_cpu_float32"] >= (1.0 if row["dtype"] == "float32" else 0.9)
    assert {r["knockout_map"]["path"] for r in report["rows"]} == {"final_position", "kv_cache"}
