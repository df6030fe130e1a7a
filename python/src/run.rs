//! `run`: train in the arithmetic chosen (the library's [`Choice`]); the summary, the
//! trainer, the checkpoints as arrays and the labels.

use ndarray::{Array1, ArrayD, IxDyn};
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::formats::record::{Leaf, Leaves};
use tokensel::prelude::train::check_memory;
use tokensel::prelude::{
    Arith, ArithVisitor, Choice, Config, Dataset, Summary, Trainer, Trajectory,
};

use crate::config::PyConfig;
use crate::errors::lib;
use crate::supplied::{data_of, or_generate};

/// What `run` returns: summary JSON, trainer JSON, checkpoint arrays, labels, the final
/// parameter blocks by name.
type RunOut<'py> = (
    String,
    String,
    Bound<'py, PyDict>,
    Bound<'py, PyDict>,
    Bound<'py, PyDict>,
);

/// A trainer's parameter blocks: (name, shape, row-major f64 values).
type Blocks = Vec<(&'static str, Vec<usize>, Vec<f64>)>;

/// Train `cfg` on `data` (`None`: generated) in the arithmetic visited (the config's
/// formulation and method), memory checked first.
struct Train<'a> {
    cfg: &'a Config,
    data: Option<Dataset>,
}

impl ArithVisitor for Train<'_> {
    type Output = (Trajectory, Blocks);
    /// `Trainer::run`'s steps, keeping the trainer for its final blocks.
    fn visit<A: Arith>(self, ar: A) -> tokensel::Result<(Trajectory, Blocks)> {
        check_memory(self.cfg, ar.kind(), ar.prec(), self.cfg.method)?;
        let data = or_generate(self.cfg, self.data);
        let mut tr = Trainer::new(self.cfg, &data, ar, self.cfg.formulation)?;
        let traj = tr.record(None, &mut |_, _| Ok(()))?;
        Ok((traj, tr.blocks()))
    }
}

/// Blocks as arrays by name, each of its shape.
pub(crate) fn block_arrays<'py>(
    py: Python<'py>,
    blocks: Blocks,
    suffix: &str,
    out: &Bound<'py, PyDict>,
) -> PyResult<()> {
    for (name, shape, values) in blocks {
        out.set_item(format!("{name}{suffix}"), array(py, &shape, values))?;
    }
    Ok(())
}

/// Train `config` in `arithmetic` (f64, f32, mpfr, predictor, ball; `prec` bits for mpfr
/// and ball). Returns the summary as JSON (the keys of `tokensel run --json`), the
/// trainer as JSON, the checkpoints as arrays, the observed and true training labels,
/// and the final parameter blocks by their declared names (rounded to f64: `p` and,
/// where dense, `W`; the factorised map's `W_Q`, `W_K`, `b_Q`, `b_K`, `p`).
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
    let (traj, blocks) = lib(py.detach(|| ar.with(Train { cfg: &cfg, data })))?;
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
    let params = PyDict::new(py);
    block_arrays(py, blocks, "", &params)?;
    Ok((
        summary,
        trainer,
        checkpoint_arrays(py, &traj)?,
        labels,
        params,
    ))
}

/// The parents whose named entries (token groups, selection kinds) share one array, the
/// entries on its last axis (`attention_clean`, `mass`, `classes_selection_noisy`).
const ENTRY_PARENTS: [&str; 7] = [
    "attention.clean",
    "attention.noisy",
    "selection.clean",
    "selection.noisy",
    "classes.selection.clean",
    "classes.selection.noisy",
    "mass",
];

/// The array a record leaf belongs to: its path without `samples.` and with `_` for `.`
/// (a sample's f is `output`; named entries share their parent's array).
fn array_name(path: &str) -> String {
    if path == "samples.f" {
        return "output".into();
    }
    let p = path.strip_prefix("samples.").unwrap_or(path);
    let p = match p.rsplit_once('.') {
        Some((parent, _)) if ENTRY_PARENTS.contains(&parent) => parent,
        _ => p,
    };
    p.replace('.', "_")
}

/// `values` (checkpoint-major) as an array of `shape`.
fn array<'py, T: numpy::Element>(
    py: Python<'py>,
    shape: &[usize],
    values: Vec<T>,
) -> Bound<'py, PyAny> {
    ArrayD::from_shape_vec(IxDyn(shape), values)
        .expect("the shape holds the values")
        .into_pyarray(py)
        .into_any()
}

/// The checkpoints of a trajectory as arrays whose first axis is the checkpoint, one per
/// record leaf path ([`tokensel::prelude::formats::record::visit`]): `(k,)` for a checkpoint's scalar,
/// `(k, m)` for its m entries (groups, classes), `(k, n)` per training sample and
/// `(k, n, m)` for a sample's m entries (group masses, a K-class run's outputs); an
/// absent value is NaN; the step is u64, a top token i64, a selection its code (u8), the
/// prompt's top flag bool.
fn checkpoint_arrays<'py>(py: Python<'py>, traj: &Trajectory) -> PyResult<Bound<'py, PyDict>> {
    let cps = &traj.checkpoints;
    let (k, n) = (cps.len(), traj.y.len());
    let tokens = traj.config.layout.tokens;
    // each array's leaves: (name, per sample, leaves per checkpoint)
    let mut arrays: Vec<(String, bool, Vec<Vec<Leaf>>)> = Vec::new();
    for (i, c) in cps.iter().enumerate() {
        for (path, leaf) in Leaves::of(c, tokens).0 {
            let name = array_name(&path);
            let at = match arrays.iter().position(|a| a.0 == name) {
                Some(at) => at,
                None => {
                    arrays.push((name, path.starts_with("samples."), vec![Vec::new(); k]));
                    arrays.len() - 1
                }
            };
            arrays[at].2[i].push(leaf);
        }
    }
    let out = PyDict::new(py);
    for (name, per_sample, leaves) in arrays {
        let m = leaves[0].len();
        let fits = leaves.iter().all(|l| l.len() == m) && (!per_sample || m % n == 0);
        if !fits {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "the record's `{name}` does not hold the same number of values at every \
                 checkpoint, per sample"
            )));
        }
        let mut shape = vec![k];
        match per_sample {
            true if m / n > 1 => shape.extend([n, m / n]),
            true => shape.push(n),
            false if m > 1 => shape.push(m),
            false => {}
        }
        let flat = || leaves.iter().flatten();
        let a = match flat().next() {
            Some(Leaf::Count(_)) => {
                let v = flat().map(|l| if let Leaf::Count(v) = l { *v } else { 0 });
                array(py, &shape, v.collect())
            }
            Some(Leaf::Index(_)) => {
                let v = flat().map(|l| {
                    if let Leaf::Index(v) = l {
                        *v as i64
                    } else {
                        -1
                    }
                });
                array(py, &shape, v.collect())
            }
            Some(Leaf::Category(_)) => {
                let v = flat().map(|l| {
                    if let Leaf::Category(v) = l {
                        *v
                    } else {
                        u8::MAX
                    }
                });
                array(py, &shape, v.collect())
            }
            Some(Leaf::Flag(_)) => {
                let v = flat().map(|l| matches!(l, Leaf::Flag(true)));
                array(py, &shape, v.collect())
            }
            _ => array(py, &shape, flat().map(|l| l.number()).collect()),
        };
        out.set_item(name, a)?;
    }
    Ok(out)
}
