//! `run`: train in the arithmetic chosen (the library's [`Choice`]); the summary, the
//! trainer, the checkpoints as arrays and the labels.

use ndarray::{Array1, Array2, Array3};
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::arith::{Arith, ArithVisitor, Choice};
use tokensel::config::Config;
use tokensel::data::Dataset;
use tokensel::io::trajectory::{Checkpoint, DirectionPoint, SampleState, Summary, Trajectory};
use tokensel::train::{Trainer, check_memory};

use crate::config::PyConfig;
use crate::errors::lib;
use crate::supplied::{data_of, or_generate};

/// What `run` returns: summary JSON, trainer JSON, checkpoint arrays, labels.
type RunOut<'py> = (String, String, Bound<'py, PyDict>, Bound<'py, PyDict>);

/// Train `cfg` on `data` (`None`: generated) in the arithmetic visited (the config's
/// formulation and method), memory checked first.
struct Train<'a> {
    cfg: &'a Config,
    data: Option<Dataset>,
}

impl ArithVisitor for Train<'_> {
    type Output = Trajectory;
    fn visit<A: Arith>(self, ar: A) -> tokensel::Result<Trajectory> {
        check_memory(self.cfg, ar.kind(), ar.prec(), self.cfg.method)?;
        let data = or_generate(self.cfg, self.data);
        Trainer::run(self.cfg, &data, ar, &mut |_| {})
    }
}

/// Train `config` in `arithmetic` (f64, f32, mpfr, predictor, ball; `prec` bits for mpfr
/// and ball). Returns the summary as JSON (the keys of `tokensel run --json`), the
/// trainer as JSON, the checkpoints as arrays, and the observed and true training labels.
#[pyfunction]
#[pyo3(signature = (config, arithmetic="f64", prec=None, data=None))]
pub(crate) fn run<'py>(
    py: Python<'py>,
    config: &PyConfig,
    arithmetic: &str,
    prec: Option<u32>,
    data: Option<&Bound<'py, PyDict>>,
) -> PyResult<RunOut<'py>> {
    let ar = lib(Choice::parse(arithmetic, prec))?;
    let cfg = config.inner.clone();
    let data = data_of(&cfg, data)?;
    let traj = lib(py.detach(|| ar.with(Train { cfg: &cfg, data })))?;
    // a Ctrl-C that arrived while the GIL was released is raised here, before any
    // NumPy call (which would otherwise find the exception pending)
    py.check_signals()?;
    let summary = serde_json::to_string(&Summary::of(&traj)).expect("summary serialises");
    let trainer = serde_json::to_string(&traj.trainer).expect("trainer serialises");
    let labels = PyDict::new(py);
    labels.set_item("y_train", Array1::from_vec(traj.y.clone()).into_pyarray(py))?;
    labels.set_item(
        "y_true_train",
        Array1::from_vec(traj.y_true.clone()).into_pyarray(py),
    )?;
    Ok((summary, trainer, checkpoint_arrays(py, &traj)?, labels))
}

/// The checkpoints of a trajectory as arrays whose first axis is the checkpoint.
fn checkpoint_arrays<'py>(py: Python<'py>, traj: &Trajectory) -> PyResult<Bound<'py, PyDict>> {
    let cps = &traj.checkpoints;
    let (k, n) = (cps.len(), traj.y.len());
    let out = PyDict::new(py);
    let scalar = |f: &dyn Fn(&Checkpoint) -> f64| -> Array1<f64> { cps.iter().map(f).collect() };
    out.set_item(
        "step",
        cps.iter()
            .map(|c| c.step)
            .collect::<Array1<u64>>()
            .into_pyarray(py),
    )?;
    out.set_item("train_loss", scalar(&|c| c.train_loss).into_pyarray(py))?;
    out.set_item(
        "train_accuracy",
        scalar(&|c| c.train_accuracy).into_pyarray(py),
    )?;
    out.set_item(
        "test_accuracy",
        scalar(&|c| c.test_accuracy).into_pyarray(py),
    )?;
    out.set_item("q_norm", scalar(&|c| c.q_norm).into_pyarray(py))?;
    out.set_item("grad_norm", scalar(&|c| c.grad_norm).into_pyarray(py))?;
    for (name, f) in [
        (
            "cumulative_clean",
            (|c: &Checkpoint| c.cumulative.clean) as fn(&Checkpoint) -> f64,
        ),
        ("cumulative_noisy", |c: &Checkpoint| c.cumulative.noisy),
        ("cumulative_class_pos", |c: &Checkpoint| {
            c.cumulative.class_pos
        }),
        ("cumulative_class_neg", |c: &Checkpoint| {
            c.cumulative.class_neg
        }),
    ] {
        out.set_item(name, scalar(&f).into_pyarray(py))?;
    }
    // per-set means, NaN where the set is empty
    for (name, pick) in [("attention_clean", true), ("attention_noisy", false)] {
        let a = Array2::from_shape_fn((k, 4), |(i, g)| {
            let set = if pick {
                cps[i].attention.clean
            } else {
                cps[i].attention.noisy
            };
            set.map_or(f64::NAN, |v| v.to_array()[g])
        });
        out.set_item(name, a.into_pyarray(py))?;
    }
    for (name, pick) in [("selection_clean", true), ("selection_noisy", false)] {
        let a = Array2::from_shape_fn((k, 6), |(i, g)| {
            let set = if pick {
                cps[i].selection.clean
            } else {
                cps[i].selection.noisy
            };
            set.map_or(f64::NAN, |v| v.to_array()[g])
        });
        out.set_item(name, a.into_pyarray(py))?;
    }
    let per_sample = |f: &dyn Fn(&SampleState) -> f64| {
        Array2::from_shape_fn((k, n), |(i, s)| f(&cps[i].samples[s]))
    };
    out.set_item("output", per_sample(&|s| s.f).into_pyarray(py))?;
    // the K-class model's outputs f_0, ..., f_{K-1} per sample (k, n, K)
    if traj.config.model.is_multiclass() {
        let classes = traj.config.model.classes;
        let mut flat = Vec::with_capacity(k * n * classes);
        for sample in cps.iter().flat_map(|c| &c.samples) {
            match &sample.outputs {
                Some(o) if o.len() == classes => flat.extend_from_slice(o),
                _ => {
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                        "a K-class trajectory's sample without its {classes} outputs"
                    )));
                }
            }
        }
        let outputs = Array3::from_shape_vec((k, n, classes), flat).expect("k x n x K outputs");
        out.set_item("outputs", outputs.into_pyarray(py))?;
    }
    out.set_item("gap", per_sample(&|s| s.gap).into_pyarray(py))?;
    out.set_item("rest", per_sample(&|s| s.rest).into_pyarray(py))?;
    out.set_item(
        "selection_score",
        per_sample(&|s| s.selection_score).into_pyarray(py),
    )?;
    out.set_item(
        "top",
        Array2::from_shape_fn((k, n), |(i, s)| cps[i].samples[s].top as i64).into_pyarray(py),
    )?;
    out.set_item(
        "selection",
        Array2::from_shape_fn((k, n), |(i, s)| cps[i].samples[s].selection.code()).into_pyarray(py),
    )?;
    out.set_item(
        "mass",
        Array3::from_shape_fn((k, n, 4), |(i, s, g)| cps[i].samples[s].mass.to_array()[g])
            .into_pyarray(py),
    )?;
    // the in-sequence prompt (position 0): s_0 and whether it is the top position
    if traj.config.model.in_sequence() {
        let prompt = |i: usize, s: usize| cps[i].samples[s].prompt;
        out.set_item(
            "prompt_attention",
            Array2::from_shape_fn((k, n), |(i, s)| {
                prompt(i, s).map_or(f64::NAN, |p| p.attention)
            })
            .into_pyarray(py),
        )?;
        out.set_item(
            "prompt_top",
            Array2::from_shape_fn((k, n), |(i, s)| prompt(i, s).is_some_and(|p| p.top))
                .into_pyarray(py),
        )?;
    }
    // the direction against the attention SVM (`[direction]`), NaN where not defined
    if traj.direction.is_some() {
        type Pick = fn(&DirectionPoint) -> Option<f64>;
        let picks: [Pick; 5] = [
            |d| d.one_minus_corr,
            |d| Some(d.norm),
            |d| d.margin,
            |d| d.support_deviation,
            |d| Some(d.on_pattern),
        ];
        for (name, pick) in DirectionPoint::NAMES.into_iter().zip(picks) {
            let v = scalar(&|c| c.direction.as_ref().and_then(pick).unwrap_or(f64::NAN));
            out.set_item(name, v.into_pyarray(py))?;
        }
    }
    Ok(out)
}
