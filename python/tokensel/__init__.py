"""tokensel from Python: the reference trainer of the token-selection attention model
(Sakamoto & Sato, arXiv 2409.17625), its MPFR twin, compare and judge, on NumPy arrays.

Every number comes from the Rust library (this package only converts arguments and
results); the GIL is released while it computes. Bad input raises a subclass of
:class:`ValueError` (:mod:`tokensel.errors`) with the command line's message.

>>> import tokensel
>>> cfg = tokensel.Config(steps=1000)              # the balanced preset, 1000 steps
>>> arrays = tokensel.data(cfg)                    # the arrays of `tokensel data`
>>> result = tokensel.run(cfg)                     # f64; also f32, mpfr, predictor, ball
>>> result.summary["test_accuracy"]                # the keys of `tokensel run --json`

Grids run cell by cell in any Python pool (joblib, submitit, Ray): :func:`grid_cells`,
:func:`run_cell`, :func:`grid_merge` write the files of ``tokensel grid``; a
:class:`Config` pickles.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from . import errors
from ._tokensel import DEFAULT_BALL_PREC, DEFAULT_PREC, Config, __version__
from . import _tokensel

__all__ = [
    "Config",
    "Run",
    "Data",
    "data",
    "run",
    "judge",
    "JudgeReport",
    "LabelFlipWarning",
    "format_report",
    "write_data",
    "compare",
    "certify",
    "svm",
    "protocol",
    "GridSpec",
    "GridCell",
    "CellRun",
    "GridSummary",
    "grid_cells",
    "run_cell",
    "grid_merge",
    "errors",
    "DEFAULT_PREC",
    "DEFAULT_BALL_PREC",
    "__version__",
]


def data(config: Config) -> dict[str, np.ndarray]:
    """The exact arrays of ``config``'s run, bit for bit the NPY files of ``tokensel data``.

    Keys: ``X_train`` (n, T, d), ``y_train`` and ``y_true_train`` (n, int8: observed
    and true labels; +1/-1, or class indices 0..K-1 for the K-class model), ``noisy_train``
    (n, bool), ``nu`` (d; the K-class model's head (K, d), row c is nu_c), ``X_test``
    (n_test, T, d), ``y_test`` (n_test, int8), and the run's initial parameter blocks
    as ``<block>0``: ``p0`` (d) and, when W is dense, ``W0`` (d, d); for the factorised
    map (``factorised={...}``) ``W_Q0``, ``W_K0`` (m, d), with biases ``b_Q0``,
    ``b_K0`` (m), and ``p0`` (d). A config ``tokensel data`` refuses is refused here by
    the same capability check.
    """
    return _call(_tokensel.data, config)


@dataclass(frozen=True)
class Run:
    """A finished run.

    ``summary``: the object ``tokensel run --json`` prints (same keys, same bits).
    ``trainer``: the arithmetic, its precision, formulation and (resolved) method.
    ``checkpoints``: arrays whose first axis is the checkpoint (log-spaced steps):
    ``step``, ``train_loss``, ``train_accuracy``, ``test_accuracy``, ``q_norm``,
    ``grad_norm``, ``cumulative_{clean,noisy,class_pos,class_neg}`` (k,);
    ``attention_{clean,noisy}`` (k, 4: R, W_same, W_opposite, I; NaN for an empty set);
    ``selection_{clean,noisy}`` (k, 6: the groups, tie, undecided); per training sample
    ``output``, ``gap``, ``rest``, ``selection_score``, ``top`` (int64), ``selection``
    (int8 code) (k, n) and ``mass`` (k, n, 4). For the K-class model (``model =
    "multiclass"``) ``output`` is the margin f_Y - max_{c != Y} f_c of the observed
    class Y (positive exactly where Y is predicted) and ``outputs`` (k, n, K) holds the K
    outputs f_0, ..., f_{K-1} of every training sample. With a ``direction`` section
    (``direction={"pattern": "theorem"}``: the run against the proved attention SVM
    solution, docs/svm.md, "The direction of a run"): ``direction_one_minus_corr``,
    ``direction_norm``, ``direction_margin``, ``direction_support_deviation`` and
    ``direction_on_pattern`` (k,), NaN where not defined (step 0), and
    ``summary["direction"]`` holds the limit and the last record. A K-class run's
    per-class metrics, named by their record paths: ``classes_train_accuracy``,
    ``classes_test_accuracy``, ``classes_selection_score`` (k, K; NaN for a class
    without samples), ``classes_test_tie``, ``classes_test_undecided`` (k,) and
    ``classes_selection_{clean,noisy}`` (k, 7: R, W_true, W_observed, W_other, I, tie,
    undecided). With the prompt in sequence: ``prompt_attention`` (k, n), ``prompt_top``
    (bool, k, n) and the shares ``prompt_{attention,top}_{clean,noisy}`` (k,).
    ``labels``: ``y_train`` (observed, after any injected noise) and ``y_true_train``.
    ``blocks``: the final parameter blocks by their declared names, rounded to float64:
    ``p`` (d) and, where W is dense, ``W`` (d, d); for the factorised map ``W_Q``,
    ``W_K`` (m, d), with biases ``b_Q``, ``b_K`` (m), and ``p`` (d).
    """

    summary: dict[str, Any]
    trainer: dict[str, Any]
    checkpoints: dict[str, np.ndarray]
    labels: dict[str, np.ndarray]
    blocks: dict[str, np.ndarray]

    @property
    def digest(self) -> str:
        """SHA-256 of every recorded number's bits (equal digests: identical runs)."""
        return self.summary["trajectory_digest"]


Data = Mapping[str, Any]
"""Your own tokens: a dict of arrays with the keys of :func:`data` (``X_train`` (n, T, d),
``y_train`` (n, +1/-1), optionally ``y_true_train``, ``X_test`` (n_test, T, d), ``y_test``,
``nu`` (d)); for the K-class model (``Config(model="multiclass", classes=K)``) the labels
are integer class indices 0..K-1 (an integer dtype: floats, booleans, +1/-1 and indices
out of range are refused) and ``nu`` is (K, d), row c the head nu_c of class c (not all
rows equal); a flipped label goes to a uniformly random other class. Plus optionally ``groups`` (T: each position's group, ``"R"``,
``"W_same"``, ``"W_opposite"``, ``"I"`` or 0..3; default: the config's layout). The config
must agree with the shapes (``n_train``, ``layout``, ``d``, ``n_test``). Without
``y_true_train`` the labels are taken as true and the config's flip rule injects label
noise at rate ``eta`` (seeded); with it the labels are final: at ``eta=0`` the noise is
the data's, at ``eta > 0`` ``y_train`` must be the config's flips of ``y_true_train`` (as
:func:`data` gives them for this config, or as a run's ``labels`` give them for injected
noise). ``noisy_train``, ``p0``, ``W0`` (and a factorised config's ``W_Q0``, ``W_K0``,
``b_Q0``, ``b_K0``) may be present (as :func:`data` returns them) and
must agree with the labels and the config (``W0`` may be ``numpy.eye(d)`` where the
config's W(0) is the identity, which :func:`data` leaves out in p-mode). Without known groups the selection metrics
measure positions (the layout's), not relevance."""


def _dict(d: Data | None, config: Config | None = None, what: str = "data") -> dict[str, Any] | None:
    """``d`` as a dict (``None`` stays ``None``; anything but a mapping is a ConfigError,
    a ParseError for a trajectory); with supplied tokens whose labels are not final (no
    ``y_true_train``) under a config whose ``eta`` is above 0 (e.g. a preset's 0.2), a
    :class:`LabelFlipWarning` says at the call that tokensel flips some of the supplied
    labels (``eta=0`` keeps them as they are)."""
    if d is None:
        return None
    if not isinstance(d, Mapping):
        if what == "trajectory":
            raise errors.ParseError(
                f"external trajectory: expected a dict of arrays, got {type(d).__name__}"
            )
        raise errors.ConfigError(
            f"invalid argument `{what}`: expected a dict of arrays, got {type(d).__name__}"
        )
    d = dict(d)
    if config is not None and "y_true_train" not in d and float(config.eta) > 0:
        import warnings

        warnings.warn(
            f"tokensel flips labels of the supplied y_train: the config's eta = {config.eta} "
            "injects label noise into the supplied data (the flips your own loop must apply "
            "too); pass Config(..., eta=0) to train on the supplied labels as they are",
            LabelFlipWarning,
            stacklevel=3,
        )
    return d


class LabelFlipWarning(UserWarning):
    """Supplied data under a config with ``eta > 0``: tokensel flips some labels."""


def _call(fn: Any, *args: Any) -> Any:
    """Call the extension's ``fn``: an argument of the wrong type (the TypeError or
    OverflowError of its conversion) is raised as :class:`errors.ConfigError`, a
    ValueError naming the argument, like every other bad argument."""
    try:
        return fn(*args)
    except (TypeError, OverflowError) as e:
        message = str(e)
        name = message.split("'")[1] if message.startswith("argument '") else "arguments"
        raise errors.ConfigError(f"invalid argument `{name}`: {message}") from None


def run(
    config: Config, arithmetic: str = "f64", *, prec: int | None = None, data: Data | None = None
) -> Run:
    """Train ``config`` in ``arithmetic``: ``f64`` (the trainer), ``f32``, ``mpfr``
    (the truth twin, ``prec`` bits, default 256), ``predictor`` (the bit-exact 53-bit
    f64 predictor) or ``ball`` (certified enclosures, ``prec`` bits, default 128), in
    the config's formulation and method; on ``data`` (:data:`Data`) when given, else on
    the config's generated data."""
    summary, trainer, checkpoints, labels, blocks = _call(
        _tokensel.run, config, arithmetic, prec, _dict(data, config)
    )
    return Run(json.loads(summary), json.loads(trainer), checkpoints, labels, blocks)


def write_data(directory: str | os.PathLike, config: Config, *, data: Data | None = None) -> dict[str, Any]:
    """Write a run's exact arrays into ``directory`` in the layout of ``tokensel data``
    (NPY files, ``config.toml``, ``manifest.json`` last): ``config``'s generated data, or
    your own ``data`` (:data:`Data`; the manifest says ``"source": "supplied"`` and a
    ``groups.npy`` is added). The command line reads it with ``--data DIR`` (run, twin,
    compare) and ``judge --data DIR``. Returns the manifest."""
    try:
        path = os.fspath(directory)
    except TypeError as e:
        raise errors.ConfigError(f"invalid argument `directory`: {e}") from None
    return json.loads(_call(_tokensel.write_data, path, config, _dict(data, config)))


def judge(
    config: Config,
    trajectory: Mapping[str, Any],
    *,
    prec: int = DEFAULT_PREC,
    tol: float = 1e-8,
    data: Data | None = None,
    enclosure: int | None = DEFAULT_BALL_PREC,
) -> dict[str, Any]:
    """Judge another implementation's run on ``config``'s data (``tokensel.data``):
    replay it in the MPFR twin and report each recorded quantity's error, whether all
    stay within ``tol``, and the diagnosis (the candidate replays that explain it, or
    where it departs from them). No file is written.

    ``trajectory`` is a dict: ``steps`` (the recorded step numbers, increasing),
    ``dtype`` (``"float32"`` or ``"float64"``, what the implementation computed in),
    optionally ``implementation`` (a name) and ``config`` (config keys the
    implementation used, each checked against ``config``), and any of the quantities
    ``p``, ``q``, ``W``, ``scores``, ``attention``, ``rest``, ``output``, ``loss``,
    ``grad_q``, each an array whose first axis is the recorded step (the external
    format of ``tokensel judge``); ``<quantity>_steps`` (e.g. ``W_steps``) lists the
    steps of a quantity recorded at fewer steps than ``steps`` (a subset of them). Returns the report of ``tokensel judge --json``.
    ``data``: supplied arrays (:data:`Data`) instead of the config's generated data.
    ``enclosure``: the precision of the ball enclosure that proves values wrong
    (``None``: no enclosure, as ``--no-enclosure``).
    """
    report, text = _call(
        _tokensel.judge,
        config,
        _dict(trajectory, what="trajectory"),
        prec,
        tol,
        _dict(data, config),
        enclosure,
    )
    return JudgeReport(json.loads(report), text)

class JudgeReport(dict):
    """The report of :func:`judge`: the dict of ``tokensel judge --json``, whose
    ``str()`` is the text ``tokensel judge`` prints (also :func:`format_report`)."""

    def __init__(self, report: Mapping[str, Any], text: str) -> None:
        super().__init__(report)
        self._text = text

    def __str__(self) -> str:
        return self._text


def format_report(result: Mapping[str, Any]) -> str:
    """The text the command line prints for ``result``, a report of :func:`judge` (the
    tables, the verdict, the candidate replays, the resolution, the diagnosis and the
    proof of ``tokensel judge`` without ``--json``)."""
    if isinstance(result, JudgeReport):
        return str(result)
    if not isinstance(result, Mapping) or "diagnosis" not in result or "candidates" not in result:
        raise errors.ParseError("format_report takes a report of tokensel.judge (a dict with a diagnosis)")
    return _tokensel.format_judge(json.dumps(dict(result)))


def compare(
    config: Config,
    *,
    prec: int = DEFAULT_PREC,
    tol: float = 1e-8,
    predictor: bool = True,
    twin_method: str = "span",
    data: Data | None = None,
    predictor_steps: int | None = 1000,
    certify: int | None = None,
) -> dict[str, Any]:
    """Run the f64 trainer, the MPFR twin and (with ``predictor``) the bit-exact
    predictor over its first ``predictor_steps`` steps (``None``: the whole run) step by
    step, and with ``certify`` the ball trainer at that many bits: the report of
    ``tokensel compare --json`` (on ``data``, :data:`Data`, when given). Where a trainer
    stops early (normalised GD past f64's range) the report covers the steps before the
    stop, ``report["stopped"]`` says where and why, and a ``RuntimeWarning`` is issued
    (the command line exits with code 3)."""
    report = json.loads(
        _call(
            _tokensel.compare,
            config,
            prec,
            tol,
            predictor,
            twin_method,
            _dict(data, config),
            predictor_steps,
            certify,
        )
    )
    if report.get("stopped"):
        # the CLI exits with code 3 here; the report covers the steps before the stop
        warnings.warn(
            f"compare stopped after step {report['stopped']['last_step']}: "
            f"{report['stopped']['error']}",
            RuntimeWarning,
            stacklevel=2,
        )
    return report


def svm(
    config: Config,
    pattern: str | Sequence[int] = "optimal",
    *,
    data: Data | None = None,
) -> dict[str, Any]:
    """The attention SVM of a selection pattern (``"optimal"``, ``"theorem"`` or one token
    index per training sample) on ``config``'s data (or ``data``): solved in f64 and
    proved optimal exactly; the report of ``tokensel svm --json`` (``verdict``, the exact
    ``norm2``, the support, the multipliers)."""
    if not isinstance(pattern, str):
        try:
            pattern = list(pattern)
        except TypeError:
            raise errors.ConfigError(
                "invalid argument `pattern`: expected \"optimal\", \"theorem\" or a sequence "
                f"of token indices (one per training sample), got {type(pattern).__name__}"
            ) from None
    return json.loads(_call(_tokensel.svm, config, pattern, _dict(data, config)))


def certify(
    config: Config,
    *,
    prec: int | None = DEFAULT_BALL_PREC,
    method: str = "span",
    data: Data | None = None,
) -> dict[str, Any]:
    """Certify the run of ``config`` with ball arithmetic at ``prec`` bits (``None``:
    ``--prec auto``): the certificate of ``tokensel certify --json``, every reported
    quantity an interval ``[lo, hi]`` containing the exact-arithmetic value and every
    decision proved, a proved tie, or undecided (``decided`` is True when the final
    checkpoint decides everything)."""
    return json.loads(_call(_tokensel.certify, config, prec, method, _dict(data, config)))


def protocol(config: Config, *, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fine-tuning protocol of the paper's Section I over the seeds of ``config``'s
    ``[protocol]`` section (docs/protocol.md): per seed, a head fitted on
    a clean block with the attention fixed (phase 1), then the attention reset and trained
    on a noisy block with the head fixed (phase 2). On ``config``'s generated data, or on
    the pool ``data``: ``X_train`` (N, T, d) with its TRUE labels ``y_train`` (N >=
    ``n_clean + n_train``), ``X_test``, ``y_test``, optionally ``groups``. Returns the
    report of ``tokensel protocol --json`` (``rows``: one per seed, with
    ``train_accuracy``, ``noisy_fitted``, ``test_accuracy``, ``fits_noisy_labels`` and
    the mean largest attention per checkpoint; ``nu`` in ``data`` is accepted and ignored:
    phase 1 fits the head). Where a seed's run stops (a non-finite value), the report holds
    the seeds before it and ``stopped`` (its seed, phase and error), with a
    RuntimeWarning."""
    report = json.loads(_call(_tokensel.protocol, config, _dict(data)))
    if report.get("stopped"):
        st = report["stopped"]
        warnings.warn(
            f"tokensel.protocol: seed {st['seed']} stopped in phase {st['phase']}: {st['error']}; "
            f"the report holds the {len(report['rows'])} seed(s) before it",
            RuntimeWarning,
            stacklevel=2,
        )
    return report


GridSpec = str | os.PathLike
"""A grid as ``tokensel grid`` reads it: a :class:`pathlib.Path` (any ``os.PathLike``) to a
grid TOML file (``--grid FILE``), a ``str`` holding a grid TOML's text (``name``,
``preset``, ``seeds``, ``steps``, ``[config]``, ``[axes]``: docs/grids.md), or a ``str``
naming a preset (``--preset NAME``: a grid preset such as ``"heatmap-v1"``, or a config
preset as a grid of one cell). A ``str`` is TOML text when it holds ``=`` or a line
break, else a preset name; a file path goes in as ``pathlib.Path``."""


@dataclass(frozen=True)
class GridCell:
    """One run of a grid, small and picklable (what a pool ships to a worker):
    ``index`` (its position in grid order, as ``--shard`` counts), ``point`` (axis key to
    value), ``seed``, and ``hash`` (its file is ``cells/HASH.json`` in the grid
    directory)."""

    index: int
    point: dict[str, float]
    seed: int
    hash: str

    def __hash__(self) -> int:
        return hash((self.index, self.hash))

    @property
    def file(self) -> str:
        """The cell's file, relative to the grid directory."""
        return f"cells/{self.hash}.json"


@dataclass(frozen=True)
class CellRun:
    """What :func:`run_cell` did: ``ran`` is False when the cell's file was there already
    (a resumed grid: the cell was skipped, nothing written); ``path`` is the cell's file;
    ``failed`` is the error that stopped or refused the run (a failed cell, listed by the
    merge, as ``tokensel grid`` records it), else ``None``."""

    index: int
    path: str
    ran: bool
    failed: str | None


class GridSummary(dict):
    """The summary of :func:`grid_merge`: the dict of ``tokensel grid merge DIR --json``,
    whose ``str()`` is the table ``tokensel grid merge DIR`` prints."""

    def __init__(self, summary: Mapping[str, Any], text: str) -> None:
        super().__init__(summary)
        self._text = text

    def __str__(self) -> str:
        return self._text


def _grid_spec(spec: Any) -> dict[str, Any]:
    """``spec`` (:data:`GridSpec`) as the extension's keyword arguments."""
    if isinstance(spec, str):
        if "=" in spec or "\n" in spec:
            return {"toml": spec}
        if os.path.isfile(spec):
            raise errors.ConfigError(
                f"invalid argument `spec`: {spec!r} is read as a preset name, and a file of "
                f"that name exists; pass a grid TOML file as pathlib.Path({spec!r})"
            )
        return {"preset": spec}
    if isinstance(spec, os.PathLike):
        return {"path": os.fspath(spec)}
    raise errors.ConfigError(
        "invalid argument `spec`: expected a grid TOML's text, a preset name (str) or a "
        f"grid TOML file (pathlib.Path), got {type(spec).__name__}"
    )


def _out_dir(out_dir: Any) -> str:
    try:
        return os.fspath(out_dir)
    except TypeError as e:
        raise errors.ConfigError(f"invalid argument `out_dir`: {e}") from None


def grid_cells(spec: str | os.PathLike[str]) -> list[GridCell]:
    """Every cell of the grid ``spec`` (:data:`GridSpec`) in grid order (the first axis
    outermost, seeds innermost: the order ``tokensel grid`` runs and ``--shard K/N``
    splits). Every cell's config is validated here, before any run (bad input raises
    :class:`errors.ConfigError` or :class:`errors.ParseError`; a grid over 100,000 runs
    :class:`errors.RefusedError`)."""
    cells = _call(lambda kw: _tokensel.grid_cells(**kw), _grid_spec(spec))
    return [GridCell(i, dict(point), seed, h) for i, point, seed, h in cells]


def run_cell(spec: str | os.PathLike[str], cell: GridCell | int, out_dir: str | os.PathLike[str]) -> CellRun:
    """Run one cell of ``spec`` (a :class:`GridCell` of :func:`grid_cells` on the same
    spec, or its index) into the grid directory ``out_dir``, the directory of ``tokensel
    grid --out DIR``: ``grid.json`` is created (or checked to be this grid's, else
    :class:`errors.MismatchError`), then ``cells/HASH.json`` is written atomically with
    the bytes ``tokensel grid`` writes for that cell. A cell whose file is there already
    is skipped (``ran`` is False): calling it again resumes. Safe to call from several
    threads and processes at once on one directory (each cell its own file); the GIL is
    released while the cell runs. A cell of another grid is refused before any work."""
    if isinstance(cell, GridCell):
        index, expected = cell.index, cell.hash
    elif isinstance(cell, int) and not isinstance(cell, bool):
        index, expected = cell, None
    else:
        raise errors.ConfigError(
            f"invalid argument `cell`: expected a GridCell of grid_cells or an index, got {type(cell).__name__}"
        )
    if index < 0:
        raise errors.ConfigError(f"invalid argument `cell`: index {index} is negative")
    ran, path, failed = _call(
        lambda kw: _tokensel.run_cell(index, expected, _out_dir(out_dir), **kw), _grid_spec(spec)
    )
    return CellRun(index, path, ran, failed)


def grid_merge(out_dir: str | os.PathLike[str]) -> GridSummary:
    """``tokensel grid merge DIR``: merge the cell files of the grid directory ``out_dir``
    into ``out_dir/merged/`` (``grid.csv``, ``summary.csv``, ``summary.json`` and, for
    two axes, the heat maps), the same bytes whichever process or machine ran which
    cell. Returns the summary of ``grid merge --json``; while runs are missing
    (``summary["runs_missing"] > 0``; the CLI exits 1) the merge is partial and a
    ``RuntimeWarning`` says so."""
    summary, text = _call(_tokensel.grid_merge, _out_dir(out_dir))
    result = GridSummary(json.loads(summary), text)
    if result.get("runs_missing", 0) > 0:
        warnings.warn(
            f"{result['runs_missing']} runs have no cell file yet: the merge is partial",
            RuntimeWarning,
            stacklevel=2,
        )
    return result
