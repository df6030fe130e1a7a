#!/usr/bin/env python3
"""tokensel's proved attention-SVM solution against the max-margin repository's cvxopt one.

    python examples/max_margin_svm_check.py DATA_DIR --mma PATH [--tokensel BIN]

DATA_DIR is a generated `tokensel data` directory (W(0) = I; `tokensel svm` regenerates
the data from its config.toml and reads no supplied arrays). The script runs
`tokensel svm --config DATA_DIR/config.toml --pattern optimal --json` (BIN, default
`cargo run --release --`), rebuilds its p_mm = sum_c l_c (x_{i,alpha_i} - x_{i,t})
exactly (Python fractions) from the exact multipliers and the data's float64 tokens,
checks that ||p_mm||^2 equals the report's exact `norm2`, then solves the same SVM (the
same pattern alpha) with the repository's `p_svm_solver` (imported from PATH's
MaxMarginTokenSelection/base.py, as examples/max_margin_adapter.py imports it; cvxopt's
interior-point QP at its default tolerances or --cvxopt-tol, in float64) and prints the relative
differences of the vectors and of ||p||^2, and cvxopt's smallest margin.
"""

import argparse
import json
import shlex
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

from max_margin_adapter import import_base


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--mma", type=Path, required=True, help="your checkout of ucr-optml/max_margin_attention")
    ap.add_argument("--cvxopt-tol", type=float, help="set cvxopt's abstol, reltol and feastol (default: its own, 1e-7, 1e-6, 1e-7)")
    ap.add_argument("--tokensel", default="cargo run --release --", help="how to run tokensel (default: %(default)s)")
    args = ap.parse_args()

    base, _ = import_base(args.mma)
    manifest = json.loads((args.data_dir / "manifest.json").read_text())
    if manifest.get("source", "generated") != "generated":
        sys.exit("`tokensel svm` reads a config, not supplied arrays: give a generated `tokensel data` directory")
    if manifest.get("w0") != "identity":
        sys.exit("the data has a dense W(0): this check compares the W = I SVM")
    cmd = shlex.split(args.tokensel) + ["svm", "--config", str(args.data_dir / "config.toml"), "--pattern", "optimal", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    report = json.loads(out.stdout)
    if report["verdict"] != "proved optimal":
        sys.exit(f"tokensel svm: {report['verdict']} ({report.get('reason')})")

    x = np.load(args.data_dir / "X_train.npy")
    n, t, d = x.shape
    sel = report["selected"]
    # p_mm exactly: the float64 tokens are exact binary fractions, the multipliers exact rationals
    p = [Fraction(0)] * d
    for e in report["multipliers"]:
        i, tok = e["sample"], e["token"]
        lam = Fraction(int(e["value"]["num"]), int(e["value"]["den"]))
        for k in range(d):
            p[k] += lam * (Fraction(float(x[i, sel[i], k])) - Fraction(float(x[i, tok, k])))
    norm2 = Fraction(int(report["norm2"]["num"]), int(report["norm2"]["den"]))
    if sum(v * v for v in p) != norm2:
        sys.exit("the rebuilt p_mm's squared norm differs from the report's exact norm2")
    p_mm = np.array([float(v) for v in p])  # each entry rounded once

    # the repository's solver, on the same tokens and pattern (float64)
    base.solvers.options["show_progress"] = False
    if args.cvxopt_tol is not None:
        for key in ("abstol", "reltol", "feastol"):
            base.solvers.options[key] = args.cvxopt_tol
    sol, _ = base.p_svm_solver(torch.from_numpy(x), torch.eye(d, dtype=torch.float64), torch.tensor(sel))
    p_cvx = np.array(sol).reshape(-1)
    rel_vec = np.linalg.norm(p_cvx - p_mm) / np.linalg.norm(p_mm)
    cvx_norm2 = float(p_cvx @ p_cvx)
    rel_norm2 = abs(Fraction(cvx_norm2) - norm2) / norm2
    margins = [p_cvx @ (x[i, sel[i]] - x[i, s]) for i in range(n) for s in range(t) if s != sel[i]]
    print(f"data {args.data_dir}: n = {n}, T = {t}, d = {d}, pattern optimal ({report['support']} support constraints of {report['constraints']})")
    print(f"tokensel svm: proved optimal, ||p_mm||^2 = {report['norm2_decimal_down']}... (exact rational)")
    print(f"cvxopt p_svm_solver: ||p||^2 = {cvx_norm2:.15g}, smallest margin {min(margins):.15g}")
    print(f"relative difference: vector ||p_cvx - p_mm|| / ||p_mm|| = {rel_vec:.3e}, ||p||^2 {float(rel_norm2):.3e}")


if __name__ == "__main__":
    main()
